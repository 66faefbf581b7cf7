// torch.autocast on the CPU: the ambient state and the cast policies of autocast_mode.cpp.
#include "autocast.h"

#include "analyzer_bridge.h"

#include <Python.h>

#include <string_view>
#include <unordered_map>

namespace xjit::frontend {

uint32_t AutocastState::key() const {
  if (!enabled) return 0;
  return 1u | (static_cast<uint32_t>(dtype) << 1) | (cache ? 1u << 9 : 0u);
}

namespace {

/// fn(arg), or nullptr with the Python error cleared.
PyRef callWith(PyObject *fn, PyObject *arg) {
  PyObject *r = arg ? PyObject_CallOneArg(fn, arg) : PyObject_CallNoArgs(fn);
  if (!r) PyErr_Clear();
  return PyRef::steal(r);
}

} // namespace

bool ambientMatmulBf16() {
  struct Probes {
    PyObject *getter = nullptr;  // torch._C._get_fp32_precision_getter(backend, op)
    PyObject *enabled = nullptr; // torch._C._get_mkldnn_enabled (eager's bf16 needs mkldnn)
    PyObject *levels[3][2] = {};
  };
  static Probes p = [] {
    Probes q;
    PyObject *c = PyObject_GetAttrString(torchModule(), "_C");
    q.getter = c ? PyObject_GetAttrString(c, "_get_fp32_precision_getter") : nullptr;
    q.enabled = c ? PyObject_GetAttrString(c, "_get_mkldnn_enabled") : nullptr;
    Py_XDECREF(c);
    PyErr_Clear();
    // ATen's float32Precision: the op's own setting, else its backend's "all", else generic's.
    const char *names[3][2] = {{"mkldnn", "matmul"}, {"mkldnn", "all"}, {"generic", "all"}};
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 2; ++j)
        q.levels[i][j] = PyUnicode_InternFromString(names[i][j]);
    return q; // kept for good
  }();
  if (!p.getter || !p.enabled) return false;
  PyRef on = PyRef::steal(PyObject_CallNoArgs(p.enabled));
  if (!on || on.get() != Py_True) {
    PyErr_Clear();
    return false; // torch.backends.mkldnn.enabled = False: eager's products stay f32
  }
  for (auto &level : p.levels) {
    PyObject *args[] = {level[0], level[1]};
    PyRef r = PyRef::steal(PyObject_Vectorcall(p.getter, args, 2, nullptr));
    if (!r || !PyUnicode_Check(r.get())) {
      PyErr_Clear();
      return false;
    }
    const char *v = PyUnicode_AsUTF8(r.get());
    if (!v) {
      PyErr_Clear();
      return false;
    }
    if (std::string_view(v) != "none") return std::string_view(v) == "bf16";
  }
  return false;
}

std::optional<AutocastState> ambientAutocast(std::string *why) {
  struct Probes {
    PyObject *isEnabled = nullptr;    // torch.is_autocast_enabled(device_type)
    PyObject *getDtype = nullptr;     // torch.get_autocast_dtype(device_type)
    PyObject *cacheEnabled = nullptr; // torch.is_autocast_cache_enabled()
    PyObject *anyEnabled = nullptr;   // torch._C._is_any_autocast_enabled()
    PyObject *cpu = nullptr;
  };
  static Probes p = [] {
    Probes q;
    PyObject *torch = torchModule();
    PyObject *c = PyObject_GetAttrString(torch, "_C");
    q.isEnabled = PyObject_GetAttrString(torch, "is_autocast_enabled");
    q.getDtype = PyObject_GetAttrString(torch, "get_autocast_dtype");
    q.cacheEnabled = PyObject_GetAttrString(torch, "is_autocast_cache_enabled");
    q.anyEnabled = c ? PyObject_GetAttrString(c, "_is_any_autocast_enabled") : nullptr;
    Py_XDECREF(c);
    PyErr_Clear();
    q.cpu = PyUnicode_InternFromString("cpu");
    return q; // kept for good
  }();
  auto no = [&](const char *reason) -> std::optional<AutocastState> {
    if (why) *why = reason;
    return std::nullopt;
  };
  if (!p.isEnabled || !p.getDtype || !p.cacheEnabled || !p.anyEnabled)
    return no("this torch lacks the autocast queries");
  PyRef on = callWith(p.isEnabled, p.cpu), any = callWith(p.anyEnabled, nullptr);
  PyRef dtype = callWith(p.getDtype, p.cpu), cache = callWith(p.cacheEnabled, nullptr);
  if (!on || !any || !dtype || !cache) return no("the autocast state could not be read");
  AutocastState s;
  s.enabled = on.get() == Py_True;
  // Another device's autocast leaves CPU ops alone, but the frame may ask for it.
  if (any.get() == Py_True && !s.enabled) return no("autocast is enabled for another device");
  std::optional<DType> d = dtypeFromTorch(dtype.get());
  if (s.enabled && (!d || (*d != DType::BF16 && *d != DType::F16)))
    return no("CPU autocast to a dtype other than bfloat16 or float16");
  s.dtype = d.value_or(DType::BF16);
  s.cache = cache.get() == Py_True;
  return s;
}

AutocastPolicy autocastPolicy(std::string_view name) {
  using P = AutocastPolicy;
  // The AutocastCPU kernels of torch 2.x under their Python names (torch.*, Tensor.*, F.*,
  // torch._C._nn.*, torch.linalg.*). Composite functions that eager runs through listed
  // kernels count as what they call: concat/concatenate are cat.
  static const std::unordered_map<std::string_view, P> kPolicies = {
      // lower_precision_fp
      {"conv1d", P::Lower},
      {"conv2d", P::Lower},
      {"conv3d", P::Lower},
      {"conv_tbc", P::Lower},
      {"conv_transpose1d", P::Lower},
      {"conv_transpose2d", P::Lower},
      {"conv_transpose3d", P::Lower},
      {"bmm", P::Lower},
      {"mm", P::Lower},
      {"vecdot", P::Lower},
      {"linalg_vecdot", P::Lower},
      {"baddbmm", P::Lower},
      {"addmm", P::Lower},
      {"addbmm", P::Lower},
      {"linear", P::Lower},
      {"matmul", P::Lower},
      {"__matmul__", P::Lower},
      {"__rmatmul__", P::Lower},
      {"prelu", P::Lower},
      {"scaled_dot_product_attention", P::Lower},
      // fp32
      {"avg_pool3d", P::F32},
      {"max_pool3d", P::F32},
      {"adaptive_avg_pool3d", P::F32},
      {"adaptive_max_pool3d", P::F32},
      {"fractional_max_pool2d", P::F32},
      {"fractional_max_pool3d", P::F32},
      {"max_unpool2d", P::F32},
      {"max_unpool3d", P::F32},
      {"binary_cross_entropy", P::F32},
      {"binary_cross_entropy_with_logits", P::F32},
      {"cross_entropy", P::F32},
      {"cross_entropy_loss", P::F32},
      {"nll_loss", P::F32},
      {"nll_loss2d", P::F32},
      {"mse_loss", P::F32},
      {"l1_loss", P::F32},
      {"smooth_l1_loss", P::F32},
      {"huber_loss", P::F32},
      {"kl_div", P::F32},
      {"poisson_nll_loss", P::F32},
      {"cosine_embedding_loss", P::F32},
      {"hinge_embedding_loss", P::F32},
      {"margin_ranking_loss", P::F32},
      {"soft_margin_loss", P::F32},
      {"triplet_margin_loss", P::F32},
      {"multi_margin_loss", P::F32},
      {"multilabel_margin_loss", P::F32},
      {"ctc_loss", P::F32},
      {"grid_sample", P::F32},
      {"grid_sampler", P::F32},
      {"polar", P::F32},
      {"prod", P::F32},
      {"quantile", P::F32},
      {"nanquantile", P::F32},
      {"stft", P::F32},
      {"cdist", P::F32},
      {"trace", P::F32},
      {"view_as_complex", P::F32},
      {"cholesky", P::F32},
      {"cholesky_inverse", P::F32},
      {"cholesky_solve", P::F32},
      {"inverse", P::F32},
      {"pinverse", P::F32},
      {"lu_solve", P::F32},
      {"orgqr", P::F32},
      {"ormqr", P::F32},
      {"qr", P::F32},
      {"svd", P::F32},
      {"geqrf", P::F32},
      {"triangular_solve", P::F32},
      // promote
      {"cat", P::Promote},
      {"concat", P::Promote},
      {"concatenate", P::Promote},
      {"stack", P::Promote},
      {"index_copy", P::Promote},
      // Composites whose eager kernels reach listed ones for some inputs only.
      {"inner", P::Refuse},
      {"tensordot", P::Refuse},
      {"einsum", P::Refuse},
      {"local_response_norm", P::Refuse},
      {"multi_dot", P::Refuse},
      {"chain_matmul", P::Refuse},
      {"matrix_power", P::Refuse},
      {"bilinear", P::Refuse},
  };
  auto it = kPolicies.find(name);
  return it == kPolicies.end() ? P::None : it->second;
}

} // namespace xjit::frontend
