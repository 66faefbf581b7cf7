// torch.lstm / torch.gru / torch.rnn_tanh / torch.rnn_relu (what nn.LSTM, nn.GRU and nn.RNN
// call) unrolled into IR ops over a sequence length known at capture: per layer and direction
// one input projection for every time step, then per step the recurrent matmul and the gate
// arithmetic of PyTorch's cells (aten/src/ATen/native/RNN.cpp).
#include "torch_ops.h"

#include "analyzer.h"

namespace xjit::frontend {

namespace {

enum class Cell { LSTM, GRU, Tanh, ReLU };

Cell cellOf(std::string_view op) {
  if (op == "lstm") return Cell::LSTM;
  if (op == "gru") return Cell::GRU;
  return op == "rnn_relu" ? Cell::ReLU : Cell::Tanh;
}

int64_t gateCount(Cell c) { return c == Cell::LSTM ? 4 : c == Cell::GRU ? 3 : 1; }

/// One layer's weights in one direction, in the order of nn.RNNBase._flat_weights.
struct DirectionWeights {
  VarPtr wIh, wHh, bIh, bHh, wHr; // biases and the projection may be None
};

struct RecurrentCall {
  Cell cell;
  VarPtr input;           // [T, B, I] (time first)
  std::vector<VarPtr> h0; // per layer and direction: [B, H_out]
  std::vector<VarPtr> c0; // LSTM only: [B, H]
  std::vector<DirectionWeights> weights;
  int64_t layers, directions;
  double dropout;
  bool train;
};

/// The slices of t along dim 0 as one op: its gradient is one cat, where a select per slice
/// would pad each slice's gradient to t's size (quadratic in the sequence length).
std::vector<VarPtr> unbind(Analyzer &a, const VarPtr &t) {
  return a.emit("unbind", {t}, {{"dim", Attr(int64_t(0))}});
}

VarPtr linear(Analyzer &a, const VarPtr &x, const VarPtr &w, const VarPtr &b) {
  if (isNoneVar(b)) return a.emit1("linear", {x, w});
  return a.emit1("linear", {x, w, b});
}

/// One time step of the cell: the new (h, c) from the step's input projection `xg` (x W_ih^T +
/// b_ih) and the previous state, as PyTorch's LSTMCell/GRUCell/SimpleCell compute it.
std::pair<VarPtr, VarPtr> step(Analyzer &a, const RecurrentCall &rc, const DirectionWeights &w,
                               const VarPtr &xg, const VarPtr &h, const VarPtr &c) {
  VarPtr hg = linear(a, h, w.wHh, w.bHh);
  auto chunks = [&](const VarPtr &g) {
    return a.emit("chunk", {g}, {{"chunks", Attr(gateCount(rc.cell))}, {"dim", Attr(int64_t(1))}});
  };
  switch (rc.cell) {
  case Cell::LSTM: {
    std::vector<VarPtr> g = chunks(a.emit1("add", {hg, xg}));
    VarPtr in = a.emit1("sigmoid", {g[0]}), forget = a.emit1("sigmoid", {g[1]});
    VarPtr cell = a.emit1("tanh", {g[2]}), out = a.emit1("sigmoid", {g[3]});
    VarPtr cy = a.emit1("add", {a.emit1("mul", {forget, c}), a.emit1("mul", {in, cell})});
    VarPtr hy = a.emit1("mul", {out, a.emit1("tanh", {cy})});
    if (!isNoneVar(w.wHr)) hy = linear(a, hy, w.wHr, a.none());
    return {hy, cy};
  }
  case Cell::GRU: {
    // n = tanh(W_in x + b_in + r * (W_hn h + b_hn)); h' = (h - n) * z + n.
    std::vector<VarPtr> gi = chunks(xg), gh = chunks(hg);
    VarPtr reset = a.emit1("sigmoid", {a.emit1("add", {gh[0], gi[0]})});
    VarPtr update = a.emit1("sigmoid", {a.emit1("add", {gh[1], gi[1]})});
    VarPtr fresh = a.emit1("tanh", {a.emit1("add", {gi[2], a.emit1("mul", {gh[2], reset})})});
    return {a.emit1("add", {a.emit1("mul", {a.emit1("sub", {h, fresh}), update}), fresh}), nullptr};
  }
  case Cell::Tanh:
  case Cell::ReLU:
    return {a.emit1(rc.cell == Cell::Tanh ? "tanh" : "relu", {a.emit1("add", {hg, xg})}), nullptr};
  }
  return {nullptr, nullptr};
}

/// Reads the call's arguments; false where the lowering does not apply (the PackedSequence
/// overloads, a sequence length or option not known at capture, unexpected weights).
bool readCall(Analyzer &a, BoundArgs &b, Cell cell, RecurrentCall &rc) {
  rc.cell = cell;
  auto *x = as<TensorVar>(b.at("input"));
  if (!x || x->type().rank() != 3 || isNoneVar(b.at("hx")) || as<TensorVar>(b.at("params")))
    return false;
  std::optional<int64_t> layers = a.asInt(b.at("num_layers")), biases = a.asInt(b.at("has_biases")),
                         train = a.asInt(b.at("train")), bidi = a.asInt(b.at("bidirectional")),
                         batchFirst = a.asInt(b.at("batch_first"));
  std::optional<double> dropout = a.asNumber(b.at("dropout"));
  if (!layers || !biases || !train || !bidi || !batchFirst || !dropout || *layers < 1) return false;
  rc.layers = *layers;
  rc.directions = *bidi ? 2 : 1;
  rc.dropout = *dropout;
  rc.train = *train != 0;
  rc.input = *batchFirst ? a.emit1("transpose", {b.at("input")},
                                   {{"dim0", Attr(int64_t(0))}, {"dim1", Attr(int64_t(1))}})
                         : b.at("input");
  const DimExpr &t = as<TensorVar>(rc.input)->type().shape()[0];
  if (!t.isStatic() || t.value() < 1) return false;

  // Initial states: [layers * directions, B, H] each, split per layer and direction.
  std::vector<VarPtr> states;
  if (cell == Cell::LSTM) {
    if (as<TensorVar>(b.at("hx"))) return false; // the packed overload: (input, batch_sizes, ...)
    states = a.sequenceItems(b.at("hx"), "LSTM state");
    if (states.size() != 2) return false;
  } else {
    states = {b.at("hx")};
  }
  for (const VarPtr &s : states) {
    auto *st = as<TensorVar>(s);
    if (!st || st->type().rank() != 3) return false;
  }
  const int64_t n = rc.layers * rc.directions;
  rc.h0 = unbind(a, states[0]);
  if (cell == Cell::LSTM) rc.c0 = unbind(a, states[1]);
  if (static_cast<int64_t>(rc.h0.size()) != n) return false;

  // Weights: w_ih, w_hh[, b_ih, b_hh][, w_hr] per layer and direction.
  std::vector<VarPtr> params = a.sequenceItems(b.at("params"), "RNN weights");
  const bool projected = cell == Cell::LSTM && !(as<TensorVar>(states[0])->type().shape()[2] ==
                                                 as<TensorVar>(states[1])->type().shape()[2]);
  const size_t per = 2 + (*biases ? 2 : 0) + (projected ? 1 : 0);
  if (params.size() != per * static_cast<size_t>(n)) return false;
  for (const VarPtr &p : params)
    if (!as<TensorVar>(p)) return false;
  for (int64_t i = 0; i < n; ++i) {
    const VarPtr *p = &params[per * static_cast<size_t>(i)];
    DirectionWeights w{p[0], p[1], a.none(), a.none(), a.none()};
    if (*biases) w.bIh = p[2], w.bHh = p[3];
    if (projected) w.wHr = p[per - 1];
    rc.weights.push_back(std::move(w));
  }
  // Eager's f32 nn.LSTM at batch > 1 is oneDNN's fused RNN primitive (one call per layer), which
  // beats the unrolled steps (0.70x eager at batch 8, hidden 256; docs/perf.md "Session 18");
  // with no gradient to compute there, PyTorch's op stays (a fallback node). At batch 1 the
  // per-step products are decompose-matvec's fused loops and the unrolled form wins.
  if (cell == Cell::LSTM && as<TensorVar>(states[0])->type().shape()[1] != DimExpr(int64_t(1)) &&
      as<TensorVar>(rc.input)->type().dtype() != DType::F64) {
    bool needsGrad = as<TensorVar>(rc.input)->requiresGrad;
    for (const VarPtr &p : params)
      needsGrad = needsGrad || as<TensorVar>(p)->requiresGrad;
    for (const VarPtr &s : states)
      needsGrad = needsGrad || as<TensorVar>(s)->requiresGrad;
    if (!a.gradEnabled() || !needsGrad) return false;
  }
  return true;
}

} // namespace

VarPtr lowerRecurrent(Analyzer &a, BoundArgs &b, const TorchRow &row) {
  RecurrentCall rc;
  if (!readCall(a, b, cellOf(row.op), rc)) return nullptr; // a PyTorch fallback node
  std::vector<VarPtr> hn, cn;
  VarPtr layerInput = rc.input;
  for (int64_t l = 0; l < rc.layers; ++l) {
    std::vector<VarPtr> outputs; // per direction: [T, B, H_out]
    for (int64_t d = 0; d < rc.directions; ++d) {
      const int64_t i = l * rc.directions + d;
      const DirectionWeights &w = rc.weights[static_cast<size_t>(i)];
      // The input projection of every time step as one matmul.
      VarPtr xg = linear(a, layerInput, w.wIh, w.bIh);
      VarPtr h = rc.h0[static_cast<size_t>(i)];
      VarPtr c = rc.cell == Cell::LSTM ? rc.c0[static_cast<size_t>(i)] : nullptr;
      std::vector<VarPtr> xs = unbind(a, xg), hs(xs.size());
      for (size_t s = 0; s < xs.size(); ++s) {
        const size_t t = d == 0 ? s : xs.size() - 1 - s;
        std::tie(h, c) = step(a, rc, w, xs[t], h, c);
        hs[t] = h;
      }
      outputs.push_back(a.emit1("stack", hs, {{"dim", Attr(int64_t(0))}}));
      hn.push_back(h);
      if (c) cn.push_back(c);
    }
    layerInput =
        outputs.size() == 1 ? outputs[0] : a.emit1("cat", outputs, {{"dim", Attr(int64_t(2))}});
    // Between layers, eager's at::dropout(layer_output, p, train): F.dropout's lowering draws
    // the same noise (docs/frontend.md "Dropout").
    if (rc.train && rc.dropout > 0 && l + 1 < rc.layers) {
      PyRef dropoutFn = check(
          PyObject_GetAttrString(
              check(PyImport_ImportModule("torch.nn.functional"), "torch.nn.functional").get(),
              "dropout"),
          "F.dropout");
      Args args;
      args.pos = {layerInput, b.at("dropout"), a.boolean(true)};
      layerInput = a.callObject(dropoutFn.get(), std::nullopt, args);
    }
  }
  VarPtr output = layerInput;
  if (rc.input != b.at("input"))
    output =
        a.emit1("transpose", {output}, {{"dim0", Attr(int64_t(0))}, {"dim1", Attr(int64_t(1))}});
  std::vector<VarPtr> results{output, a.emit1("stack", hn, {{"dim", Attr(int64_t(0))}})};
  if (rc.cell == Cell::LSTM) results.push_back(a.emit1("stack", cn, {{"dim", Attr(int64_t(0))}}));
  return std::make_shared<TupleVar>(std::move(results));
}

} // namespace xjit::frontend
