// Kernel IR -> LLVM IR. Each kernel becomes two functions: an internal `<sym>.impl` taking every
// buffer as a `noalias` pointer (inlined into the entry, where the pointers' no-alias facts
// survive as scoped alias metadata the vectorizer uses), and the external entry `<sym>` with the
// uniform KernelEntry ABI. Loops are emitted in the plain header/body/latch form that LLVM's loop
// passes canonicalize; vectorization is left to LLVM's loop vectorizer.
//
// Values live in registers as: bool i1, u8/i8 i8, i16, i32, i64, f16 half, bf16 i16 (raw bits,
// rounded by hand so every target rounds alike), f32 float, f64 double.
#include "llvm_codegen.h"

#include "sum_cascade.h"

#include "xjit/ir/diagnostics.h"
#include "xjit/ir/tensor.h"

#include <llvm/IR/Function.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <unordered_map>
#include <unordered_set>

namespace xjit::backend {

namespace {

using llvm::BasicBlock;
using llvm::Value;

bool isUnsignedInt(DType d) { return d == DType::U8 || d == DType::Bool; }

/// libm functions for the unary ops that are not inlined (f64; f32 goes through f64, which is also
/// what the reference kernels compute).
const char *libmName(UnaryOp op) {
  switch (op) {
  case UnaryOp::Exp: return "exp";
  case UnaryOp::Exp2: return "exp2";
  case UnaryOp::Expm1: return "expm1";
  case UnaryOp::Log: return "log";
  case UnaryOp::Log2: return "log2";
  case UnaryOp::Log10: return "log10";
  case UnaryOp::Log1p: return "log1p";
  case UnaryOp::Sin: return "sin";
  case UnaryOp::Cos: return "cos";
  case UnaryOp::Tan: return "tan";
  case UnaryOp::Asin: return "asin";
  case UnaryOp::Acos: return "acos";
  case UnaryOp::Atan: return "atan";
  case UnaryOp::Sinh: return "sinh";
  case UnaryOp::Cosh: return "cosh";
  case UnaryOp::Tanh: return "tanh";
  case UnaryOp::Asinh: return "asinh";
  case UnaryOp::Acosh: return "acosh";
  case UnaryOp::Atanh: return "atanh";
  case UnaryOp::Erf: return "erf";
  case UnaryOp::Erfc: return "erfc";
  case UnaryOp::Lgamma: return "lgamma";
  default: return nullptr;
  }
}

class Emitter {
public:
  Emitter(const Kernel &k, llvm::Module &m)
      : k_(k), inPlace_(std::any_of(k.buffers.begin(), k.buffers.end(),
                                    [](const BufferParam &p) { return p.aliasOf >= 0; })),
        m_(m), ctx_(m.getContext()), b_(ctx_) {}

  void emit(const std::string &symbol) {
    symbol_ = symbol;
    llvm::Function *impl = emitImpl(symbol + ".impl", nullptr);
    emitEntry(symbol, impl, false);
  }

private:
  // ---- types ----

  llvm::Type *regType(DType d) {
    switch (d) {
    case DType::Bool: return b_.getInt1Ty();
    case DType::U8:
    case DType::I8: return b_.getInt8Ty();
    case DType::I16:
    case DType::BF16: return b_.getInt16Ty();
    case DType::I32: return b_.getInt32Ty();
    case DType::I64: return b_.getInt64Ty();
    case DType::F16: return b_.getHalfTy();
    case DType::F32: return b_.getFloatTy();
    case DType::F64: return b_.getDoubleTy();
    }
    return nullptr;
  }
  llvm::Type *memType(DType d) { return d == DType::Bool ? b_.getInt8Ty() : regType(d); }

  // ---- functions ----

  /// The body function: every buffer a `noalias` pointer, then sizes, strides, scalars, the
  /// data array (for parallel loops to hand on), and with `loop` (a parallel loop's body
  /// function) the range [begin, end) of its iterations. Always inlined into its wrapper.
  llvm::Function *emitImpl(const std::string &name, const Stmt *loop) {
    std::vector<llvm::Type *> params(k_.buffers.size() + 4, b_.getPtrTy());
    if (loop) params.insert(params.end(), 2, b_.getInt64Ty());
    auto *fty = llvm::FunctionType::get(b_.getInt32Ty(), params, false);
    fn_ = llvm::Function::Create(fty, llvm::Function::InternalLinkage, name, m_);
    fn_->addFnAttr(llvm::Attribute::AlwaysInline);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    for (unsigned i = 0; i < fn_->arg_size(); ++i) {
      fn_->addParamAttr(i, llvm::Attribute::NoAlias);
      fn_->addParamAttr(i, llvm::Attribute::NoCapture);
    }
    for (size_t i = 0; i < k_.buffers.size(); ++i) {
      fn_->getArg(unsigned(i))->setName(k_.buffers[i].name);
      if (!k_.buffers[i].output && !writtenInPlace(int64_t(i)))
        fn_->addParamAttr(unsigned(i), llvm::Attribute::ReadOnly);
    }
    size_t nb = k_.buffers.size();
    for (unsigned i = unsigned(nb); i < nb + 4; ++i)
      fn_->addParamAttr(i, llvm::Attribute::ReadOnly);
    if (loop) {
      fn_->removeParamAttr(unsigned(nb + 4), llvm::Attribute::NoAlias);
      fn_->removeParamAttr(unsigned(nb + 4), llvm::Attribute::NoCapture);
      fn_->removeParamAttr(unsigned(nb + 5), llvm::Attribute::NoAlias);
      fn_->removeParamAttr(unsigned(nb + 5), llvm::Attribute::NoCapture);
    }

    BasicBlock *entry = BasicBlock::Create(ctx_, "entry", fn_);
    b_.SetInsertPoint(entry);
    loadRuntimeParams();
    accSlots_.clear();
    for (const AccDecl &a : k_.accs)
      accSlots_.push_back(b_.CreateAlloca(
          regType(a.dtype), a.lanes ? b_.getInt64(uint64_t(a.lanes)) : nullptr, a.name));
    vars_.assign(size_t(k_.numVars), nullptr);
    fail_ = nullptr;
    failCode_ = nullptr;
    if (loop && !loop->partials.empty())
      emitReductionChunks(*loop, fn_->getArg(unsigned(nb + 4)), fn_->getArg(unsigned(nb + 5)));
    else if (loop)
      emitFor(*loop, fn_->getArg(unsigned(nb + 4)), fn_->getArg(unsigned(nb + 5)));
    else
      stmts(k_.body);
    b_.CreateRet(b_.getInt32(0));
    return fn_;
  }

  /// The state of the function being emitted (a parallel loop's body is emitted as a separate
  /// function in the middle of its parent).
  struct FnState {
    llvm::Function *fn;
    std::vector<std::vector<Value *>> sizes, strides;
    std::vector<Value *> params, vars;
    std::vector<llvm::AllocaInst *> accSlots;
    BasicBlock *fail;
    llvm::PHINode *failCode;
    std::unordered_map<const ExprNode *, Value *> memo, indexMemo;
    llvm::IRBuilderBase::InsertPoint ip;
  };
  FnState saveState() {
    return {fn_,   sizes_,    strides_, params_,    vars_,      accSlots_,
            fail_, failCode_, memo_,    indexMemo_, b_.saveIP()};
  }
  void restoreState(FnState st) {
    fn_ = st.fn;
    sizes_ = std::move(st.sizes);
    strides_ = std::move(st.strides);
    params_ = std::move(st.params);
    vars_ = std::move(st.vars);
    accSlots_ = std::move(st.accSlots);
    fail_ = st.fail;
    failCode_ = st.failCode;
    memo_ = std::move(st.memo);
    indexMemo_ = std::move(st.indexMemo);
    b_.restoreIP(st.ip);
  }

  /// A parallel loop: its body becomes a task function over a range of iterations, run by
  /// xjit_rt_parallel_for (on one thread when the total work is small).
  void emitParallelFor(const Stmt &s) {
    if (!s.partials.empty()) return emitParallelReduction(s);
    size_t nb = k_.buffers.size();
    callParallel(s, fn_->getArg(unsigned(nb + 3)), indexExpr(s.a), indexExpr(s.b));
  }

  /// Calls xjit_rt_parallel_for on the task made of `s` over [0, n) with `data` as the data
  /// array; returns from the kernel with the task's code when it fails.
  void callParallel(const Stmt &s, Value *data, Value *n, Value *work) {
    std::string name = symbol_ + ".task" + std::to_string(numTasks_++);
    FnState saved = saveState();
    sizes_.clear();
    strides_.clear();
    params_.clear();
    memo_.clear();
    indexMemo_.clear();
    llvm::Function *impl = emitImpl(name + ".impl", &s);
    llvm::Function *task = emitEntry(name, impl, true);
    restoreState(std::move(saved));
    size_t nb = k_.buffers.size();
    llvm::Type *ptr = b_.getPtrTy(), *i64 = b_.getInt64Ty();
    llvm::FunctionCallee run = m_.getOrInsertFunction(kParallelForSymbol, b_.getInt32Ty(), ptr, ptr,
                                                      ptr, ptr, ptr, i64, i64);
    Value *rc =
        b_.CreateCall(run, {task, data, fn_->getArg(unsigned(nb)), fn_->getArg(unsigned(nb + 1)),
                            fn_->getArg(unsigned(nb + 2)), n, work});
    // A failed iteration's code (an assert's or division by zero) stops the kernel.
    BasicBlock *cont = BasicBlock::Create(ctx_, "parallel.ok", fn_);
    BasicBlock *failed = BasicBlock::Create(ctx_, "parallel.failed", fn_);
    b_.CreateCondBr(b_.CreateICmpEQ(rc, b_.getInt32(0)), cont, failed);
    b_.SetInsertPoint(failed);
    b_.CreateRet(rc);
    b_.SetInsertPoint(cont);
  }

  /// The number of chunks of a parallel reduction over `n` iterations: min(n, kReductionChunks).
  Value *reductionChunks(Value *n) {
    return b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, n, b_.getInt64(kReductionChunks));
  }

  /// A parallel reduction loop (Stmt::partials): the task reduces each chunk of iterations into
  /// that chunk's slot of an array per accumulator (handed to it after the buffers in its data
  /// array); then this thread combines the slots into the accumulators in chunk order.
  void emitParallelReduction(const Stmt &s) {
    llvm::Type *ptr = b_.getPtrTy();
    size_t nb = k_.buffers.size();
    Value *n = indexExpr(s.a);
    Value *chunks = reductionChunks(n);
    // Work of one chunk: its iterations (at most ceil(n / chunks)) times one iteration's.
    Value *denominator = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, chunks, b_.getInt64(1));
    Value *perChunk =
        b_.CreateSDiv(b_.CreateAdd(n, b_.CreateSub(denominator, b_.getInt64(1))), denominator);
    Value *work = b_.CreateMul(indexExpr(s.b), perChunk);
    llvm::AllocaInst *data = nullptr;
    std::vector<llvm::AllocaInst *> slots;
    {
      llvm::IRBuilderBase::InsertPointGuard guard(b_);
      b_.SetInsertPoint(&fn_->getEntryBlock(), fn_->getEntryBlock().getFirstInsertionPt());
      data = b_.CreateAlloca(ptr, b_.getInt64(nb + s.partials.size()), "reduction.data");
      for (const auto &[acc, combine] : s.partials)
        slots.push_back(b_.CreateAlloca(regType(k_.accs[size_t(acc)].dtype),
                                        b_.getInt64(kReductionChunks),
                                        "partials." + k_.accs[size_t(acc)].name));
    }
    Value *inData = fn_->getArg(unsigned(nb + 3));
    for (size_t i = 0; i < nb; ++i)
      b_.CreateStore(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, inData, i)),
                     b_.CreateConstInBoundsGEP1_64(ptr, data, i));
    for (size_t p = 0; p < slots.size(); ++p) {
      b_.CreateStore(slots[p], b_.CreateConstInBoundsGEP1_64(ptr, data, nb + p));
      // Chunk 0's slot holds the identity when there are no chunks (n == 0).
      auto [acc, combine] = s.partials[p];
      b_.CreateStore(combineIdentity(combine, k_.accs[size_t(acc)].dtype), slots[p]);
    }
    callParallel(s, data, chunks, work);
    // Pairwise (slot c += slot c + w, for w = 1, 2, 4, ...) on this thread: the result does not
    // depend on how chunks were spread, and a sum's error grows with log2(chunks), not chunks.
    if (!sumCascadeEnabled()) return combineChunksInOrder(s, chunks, slots);
    auto doubled = [&](Value *w) { return b_.CreateShl(w, 1, "", true, true); };
    emitLoopOver(b_.getInt64(1), chunks, doubled, [&](Value *w) {
      Value *twice = b_.CreateShl(w, 1);
      Value *pairs = b_.CreateSDiv(b_.CreateAdd(chunks, b_.CreateSub(w, b_.getInt64(1))), twice);
      emitCountedLoop(b_.getInt64(0), pairs, [&](Value *j) {
        Value *c = b_.CreateMul(j, twice);
        for (size_t p = 0; p < slots.size(); ++p) {
          auto [acc, combine] = s.partials[p];
          llvm::Type *t = regType(k_.accs[size_t(acc)].dtype);
          Value *to = b_.CreateInBoundsGEP(t, slots[p], c);
          Value *from = b_.CreateInBoundsGEP(t, slots[p], b_.CreateAdd(c, w));
          Value *v = combineValues(combine, k_.accs[size_t(acc)].dtype, b_.CreateLoad(t, to),
                                   b_.CreateLoad(t, from));
          b_.CreateStore(v, to);
        }
      });
    });
    for (size_t p = 0; p < slots.size(); ++p) {
      auto [acc, combine] = s.partials[p];
      DType d = k_.accs[size_t(acc)].dtype;
      Value *slot = accSlots_[size_t(acc)];
      Value *part = b_.CreateLoad(regType(d), slots[p]);
      b_.CreateStore(combineValues(combine, d, b_.CreateLoad(regType(d), slot), part), slot);
    }
  }

  /// XJIT_SUM_CASCADE=0: the chunks' slots combined into the accumulators in chunk order.
  void combineChunksInOrder(const Stmt &s, Value *chunks,
                            const std::vector<llvm::AllocaInst *> &slots) {
    emitCountedLoop(b_.getInt64(0), chunks, [&](Value *c) {
      for (size_t p = 0; p < slots.size(); ++p) {
        auto [acc, combine] = s.partials[p];
        DType d = k_.accs[size_t(acc)].dtype;
        Value *slot = accSlots_[size_t(acc)];
        Value *part = b_.CreateLoad(regType(d), b_.CreateInBoundsGEP(regType(d), slots[p], c));
        b_.CreateStore(combineValues(combine, d, b_.CreateLoad(regType(d), slot), part), slot);
      }
    });
  }

  /// A parallel reduction's task over chunks [begin, end): each chunk's iterations reduce into
  /// the task's accumulators, reset to the identity first, then stored in the chunk's slots.
  void emitReductionChunks(const Stmt &s, Value *begin, Value *end) {
    llvm::Type *ptr = b_.getPtrTy();
    size_t nb = k_.buffers.size();
    Value *n = indexExpr(s.a);
    Value *chunks = reductionChunks(n); // >= 1: a task runs only when n > 0
    Value *data = fn_->getArg(unsigned(nb + 3));
    std::vector<Value *> slots;
    for (size_t p = 0; p < s.partials.size(); ++p)
      slots.push_back(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, data, nb + p)));
    emitCountedLoop(begin, end, [&](Value *c) {
      Value *lo = b_.CreateSDiv(b_.CreateMul(c, n), chunks);
      Value *hi = b_.CreateSDiv(b_.CreateMul(b_.CreateAdd(c, b_.getInt64(1)), n), chunks);
      for (const auto &[acc, combine] : s.partials)
        b_.CreateStore(combineIdentity(combine, k_.accs[size_t(acc)].dtype),
                       accSlots_[size_t(acc)]);
      emitFor(s, lo, hi);
      for (size_t p = 0; p < slots.size(); ++p) {
        int64_t acc = s.partials[p].first;
        llvm::Type *t = regType(k_.accs[size_t(acc)].dtype);
        b_.CreateStore(b_.CreateLoad(t, accSlots_[size_t(acc)]),
                       b_.CreateInBoundsGEP(t, slots[p], c));
      }
    });
  }

  /// `for c in [begin, end) step step: body(c)`, a plain loop (not unrolled; vectorized only
  /// when asked).
  void emitCountedLoop(Value *begin, Value *end, const std::function<void(Value *)> &body,
                       int64_t step = 1, bool vectorize = false) {
    auto next = [&](Value *c) {
      return b_.CreateAdd(c, b_.getInt64(uint64_t(step)), "", true, true);
    };
    emitLoopOver(begin, end, next, body, vectorize);
  }

  /// `for (c = begin; c < end; c = next(c)) body(c)`, a plain loop (not unrolled).
  void emitLoopOver(Value *begin, Value *end, const std::function<Value *(Value *)> &next,
                    const std::function<void(Value *)> &body, bool vectorize = false) {
    BasicBlock *pre = b_.GetInsertBlock();
    BasicBlock *header = BasicBlock::Create(ctx_, "chunks", fn_);
    BasicBlock *bodyBB = BasicBlock::Create(ctx_, "chunk", fn_);
    BasicBlock *exit = BasicBlock::Create(ctx_, "chunks.done", fn_);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    llvm::PHINode *c = b_.CreatePHI(b_.getInt64Ty(), 2, "c");
    c->addIncoming(begin, pre);
    b_.CreateCondBr(b_.CreateICmpSLT(c, end), bodyBB, exit);
    b_.SetInsertPoint(bodyBB);
    body(c);
    Value *following = next(c);
    llvm::BranchInst *latch = b_.CreateBr(header);
    latch->setMetadata(llvm::LLVMContext::MD_loop, loopMetadata(vectorize, false));
    c->addIncoming(following, b_.GetInsertBlock());
    b_.SetInsertPoint(exit);
  }

  /// x such that combine(x, v) == v for every v of dtype `d`.
  llvm::Constant *combineIdentity(BinaryOp combine, DType d) {
    llvm::Type *t = regType(d);
    bool fl = isFloating(d), u = isUnsignedInt(d) || d == DType::Bool;
    unsigned bits = t->getScalarSizeInBits();
    switch (combine) {
    case BinaryOp::Mul: return fl ? llvm::ConstantFP::get(t, 1.0) : llvm::ConstantInt::get(t, 1);
    case BinaryOp::Max:
      if (fl) return llvm::ConstantFP::getInfinity(t, /*Negative=*/true);
      return llvm::ConstantInt::get(ctx_, u ? llvm::APInt::getMinValue(bits)
                                            : llvm::APInt::getSignedMinValue(bits));
    case BinaryOp::Min:
      if (fl) return llvm::ConstantFP::getInfinity(t, /*Negative=*/false);
      return llvm::ConstantInt::get(ctx_, u ? llvm::APInt::getMaxValue(bits)
                                            : llvm::APInt::getSignedMaxValue(bits));
    default: return llvm::Constant::getNullValue(t); // Add
    }
  }

  /// An accumulator's combine step, as Stmt Reduce computes it.
  Value *combineValues(BinaryOp combine, DType d, Value *cur, Value *v) {
    if (isFloating(d) && (combine == BinaryOp::Max || combine == BinaryOp::Min)) {
      // IEEE maximum / minimum propagate NaN like the IR's Max / Min, and the vectorizer knows
      // them as reductions. nsz: which of -0 and +0 a reduction returns is unspecified (PyTorch's
      // depends on its order too); ordering them cost x86 two more dependent instructions per
      // vector on the reduction's critical path (amax of [512,1000]: 77 -> 36 us).
      Value *r = b_.CreateBinaryIntrinsic(
          combine == BinaryOp::Max ? llvm::Intrinsic::maximum : llvm::Intrinsic::minimum, cur, v);
      if (auto *inst = llvm::dyn_cast<llvm::Instruction>(r)) inst->setHasNoSignedZeros(true);
      return r;
    }
    return binaryValue(combine, d, cur, v);
  }

  /// The KernelEntry wrapper (external), or with `range` a parallel task (internal):
  /// i32 (data, sizes, strides, scalars[, begin, end]) loading the buffer pointers.
  llvm::Function *emitEntry(const std::string &name, llvm::Function *impl, bool range) {
    llvm::Type *ptr = b_.getPtrTy(), *i64 = b_.getInt64Ty();
    std::vector<llvm::Type *> params = {ptr, ptr, ptr, ptr};
    if (range) params.insert(params.end(), {i64, i64});
    auto *fty = llvm::FunctionType::get(b_.getInt32Ty(), params, false);
    auto *f = llvm::Function::Create(
        fty, range ? llvm::Function::InternalLinkage : llvm::Function::ExternalLinkage, name, m_);
    f->addFnAttr(llvm::Attribute::NoUnwind);
    b_.SetInsertPoint(BasicBlock::Create(ctx_, "entry", f));
    std::vector<Value *> args;
    for (size_t i = 0; i < k_.buffers.size(); ++i) {
      Value *slot = b_.CreateConstInBoundsGEP1_64(ptr, f->getArg(0), i);
      args.push_back(b_.CreateLoad(ptr, slot, k_.buffers[i].name));
    }
    for (unsigned i = 1; i < 4; ++i)
      args.push_back(f->getArg(i));
    args.push_back(f->getArg(0));
    if (range) {
      args.push_back(f->getArg(4));
      args.push_back(f->getArg(5));
    }
    b_.CreateRet(b_.CreateCall(impl, args));
    return f;
  }

  /// Sizes, strides and scalar parameters, loaded once at entry (static sizes are constants).
  void loadRuntimeParams() {
    size_t nb = k_.buffers.size();
    Value *sizes = fn_->getArg(unsigned(nb)), *strides = fn_->getArg(unsigned(nb + 1)),
          *scalars = fn_->getArg(unsigned(nb + 2));
    llvm::Type *i64 = b_.getInt64Ty();
    for (size_t bi = 0; bi < nb; ++bi) {
      const BufferParam &p = k_.buffers[bi];
      int64_t off = k_.dimOffset(int64_t(bi));
      std::vector<Value *> sz, st;
      for (int64_t d = 0; d < p.rank(); ++d) {
        std::string tag = p.name + "." + std::to_string(d);
        if (auto v = p.sizes[size_t(d)].staticValue())
          sz.push_back(b_.getInt64(uint64_t(*v)));
        else
          sz.push_back(b_.CreateLoad(i64, b_.CreateConstInBoundsGEP1_64(i64, sizes, off + d),
                                     "size." + tag));
        st.push_back(b_.CreateLoad(i64, b_.CreateConstInBoundsGEP1_64(i64, strides, off + d),
                                   "stride." + tag));
      }
      sizes_.push_back(std::move(sz));
      strides_.push_back(std::move(st));
    }
    for (size_t i = 0; i < k_.scalars.size(); ++i) {
      const ScalarParam &s = k_.scalars[i];
      Value *slot = b_.CreateConstInBoundsGEP1_64(i64, scalars, i);
      Value *v = isFloating(s.dtype)
                     ? castValue(b_.CreateLoad(b_.getDoubleTy(), slot, s.name), DType::F64, s.dtype)
                     : castValue(b_.CreateLoad(i64, slot, s.name), DType::I64, s.dtype);
      params_.push_back(v);
    }
  }

  // ---- statements ----

  void stmts(const StmtList &list) {
    for (size_t i = 0; i < list.size();) {
      if (list[i].kind != StmtKind::Store) {
        stmt(list[i++]);
        continue;
      }
      size_t end = i;
      while (end < list.size() && list[end].kind == StmtKind::Store)
        ++end;
      // A run of stores shares one memo: a value the fusion shares between outputs (each state
      // of an unrolled recurrence is an output and the next one's operand) is computed once,
      // not once per output that uses it. A kernel computing in place (BufferParam::aliasOf)
      // computes every value (its loads done) before the first store; otherwise the run goes
      // store by store, unless a store writes a buffer that the run reads.
      memo_.clear();
      indexMemo_.clear();
      if (!inPlace_ && storesReadBack(list, i, end)) {
        for (; i < end; ++i)
          stmt(list[i]);
        continue;
      }
      if (!inPlace_) {
        for (; i < end; ++i) {
          auto [value, ptr] = storeOperands(list[i]);
          b_.CreateStore(value, ptr);
        }
        continue;
      }
      std::vector<std::pair<Value *, Value *>> run;
      for (; i < end; ++i)
        run.push_back(storeOperands(list[i]));
      for (auto &[value, ptr] : run)
        b_.CreateStore(value, ptr);
    }
  }

  /// Whether a store of list[begin, end) writes a buffer that a store of the run loads.
  static bool storesReadBack(const StmtList &list, size_t begin, size_t end) {
    std::unordered_set<int64_t> written;
    for (size_t i = begin; i < end; ++i)
      written.insert(list[i].index);
    std::unordered_set<const ExprNode *> seen;
    std::function<bool(const Expr &)> reads = [&](const Expr &e) {
      if (!e || !seen.insert(e.get()).second) return false;
      if (e->kind == ExprKind::Load && written.count(e->index)) return true;
      return std::any_of(e->args.begin(), e->args.end(), reads);
    };
    for (size_t i = begin; i < end; ++i)
      if (reads(list[i].a) || reads(list[i].b)) return true;
    return false;
  }

  /// Whether an output computes in place of input buffer `b`.
  bool writtenInPlace(int64_t b) const {
    for (const BufferParam &p : k_.buffers)
      if (p.aliasOf == b) return true;
    return false;
  }

  /// A store's value and address; an output computed in place is stored through the pointer
  /// of the input it shares, so that LLVM sees one buffer read and written at one offset.
  std::pair<Value *, Value *> storeOperands(const Stmt &s) {
    const BufferParam &p = k_.buffers[size_t(s.index)];
    Value *offset = indexExpr(s.a);
    Value *v = expr(s.b);
    if (p.dtype == DType::Bool) v = b_.CreateZExt(v, b_.getInt8Ty());
    const int64_t buffer = p.aliasOf >= 0 ? p.aliasOf : s.index;
    return {v, b_.CreateGEP(memType(p.dtype), fn_->getArg(unsigned(buffer)), offset)};
  }

  void stmt(const Stmt &s) {
    memo_.clear();
    indexMemo_.clear();
    switch (s.kind) {
    case StmtKind::For:
      if (s.parallel) return emitParallelFor(s);
      return emitFor(s, b_.getInt64(0), indexExpr(s.a));
    case StmtKind::If: {
      Value *cond = expr(s.a);
      BasicBlock *thenBB = BasicBlock::Create(ctx_, "then", fn_);
      BasicBlock *elseBB = BasicBlock::Create(ctx_, "else", fn_);
      BasicBlock *merge = BasicBlock::Create(ctx_, "endif", fn_);
      b_.CreateCondBr(cond, thenBB, elseBB);
      b_.SetInsertPoint(thenBB);
      stmts(s.body);
      b_.CreateBr(merge);
      b_.SetInsertPoint(elseBB);
      stmts(s.orelse);
      b_.CreateBr(merge);
      b_.SetInsertPoint(merge);
      return;
    }
    case StmtKind::Store: {
      auto [v, ptr] = storeOperands(s);
      b_.CreateStore(v, ptr);
      return;
    }
    case StmtKind::InitAcc: {
      Value *v = expr(s.a);
      b_.CreateStore(v, accSlot(s.index, s.b));
      return;
    }
    case StmtKind::Reduce: {
      DType d = k_.accs[size_t(s.index)].dtype;
      Value *slot = accSlot(s.index, s.b);
      Value *cur = b_.CreateLoad(regType(d), slot);
      Value *v = combineValues(s.combine, d, cur, expr(s.a));
      // A reduction's order is unspecified: let the vectorizer reassociate float sums.
      if (auto *inst = llvm::dyn_cast<llvm::Instruction>(v);
          inst && isFloating(d) && llvm::isa<llvm::FPMathOperator>(inst))
        inst->setHasAllowReassoc(true);
      b_.CreateStore(v, slot);
      return;
    }
    case StmtKind::Assert: {
      Value *ok = expr(s.a);
      BasicBlock *cont = BasicBlock::Create(ctx_, "assert.ok", fn_);
      int32_t code = s.index == kStrideCheck ? kRunGeneral : int32_t(s.index + 1);
      b_.CreateCondBr(ok, cont, failBlock(code));
      b_.SetInsertPoint(cont);
      return;
    }
    }
  }

  /// The loop `for i in [start, n)`. A loop that sums floats across its iterations is a
  /// cascade (sum_cascade.h): it sums into fresh accumulators, added to the old values after it,
  /// in blocks that do the same, level by level. A vectorized loop keeps a few partial sums
  /// that each add their share in order, so a long sum's error grew with its length (BN
  /// statistics over N*H*W: 100x eager's); the cascade's grows with the levels, like ATen's.
  void emitFor(const Stmt &s, Value *start, Value *n) {
    std::vector<CascadedSum> sums;
    if (sumCascadeEnabled()) sums = cascadedSums(k_, s);
    if (sums.empty()) return emitLoop(s, start, n);
    emitCascade(s, start, n, sums, cascadeBlocks(s));
  }

  void emitCascade(const Stmt &s, Value *start, Value *n, const std::vector<CascadedSum> &sums,
                   llvm::ArrayRef<int64_t> blocks) {
    std::vector<FreshSum> fresh = startSums(s, sums);
    if (blocks.empty()) {
      emitLoop(s, start, n);
    } else {
      Value *size = b_.getInt64(uint64_t(blocks.front()));
      emitCountedLoop(
          start, n,
          [&](Value *lo) {
            Value *hi = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin,
                                                 b_.CreateAdd(lo, size, "", false, true), n);
            emitCascade(s, lo, hi, sums, blocks.drop_front());
          },
          blocks.front());
    }
    finishSums(fresh);
  }

  /// A summed accumulator's value before a level of the cascade: a register, or a copy of the
  /// lanes [0, lanes).
  struct FreshSum {
    int64_t acc;
    Value *saved;
    Value *lanes = nullptr;
  };

  /// Saves the accumulators' values and sets them to 0.
  std::vector<FreshSum> startSums(const Stmt &s, const std::vector<CascadedSum> &sums) {
    std::vector<FreshSum> out;
    for (const CascadedSum &sum : sums) {
      const AccDecl &a = k_.accs[size_t(sum.acc)];
      llvm::Type *t = regType(a.dtype);
      llvm::AllocaInst *slot = accSlots_[size_t(sum.acc)];
      if (!a.lanes) {
        out.push_back({sum.acc, b_.CreateLoad(t, slot)});
        b_.CreateStore(llvm::Constant::getNullValue(t), slot);
        continue;
      }
      Value *lanes = b_.getInt64(uint64_t(a.lanes));
      if (sum.laneLoop && boundOutside(sum.laneLoop->a, s.index))
        lanes = indexExpr(sum.laneLoop->a);
      llvm::AllocaInst *saved = nullptr;
      {
        llvm::IRBuilderBase::InsertPointGuard guard(b_);
        b_.SetInsertPoint(&fn_->getEntryBlock(), fn_->getEntryBlock().getFirstInsertionPt());
        saved = b_.CreateAlloca(t, b_.getInt64(uint64_t(a.lanes)), "saved." + a.name);
      }
      emitCountedLoop(
          b_.getInt64(0), lanes,
          [&](Value *l) {
            Value *p = b_.CreateInBoundsGEP(t, slot, l);
            b_.CreateStore(b_.CreateLoad(t, p), b_.CreateInBoundsGEP(t, saved, l));
            b_.CreateStore(llvm::Constant::getNullValue(t), p);
          },
          1, true);
      out.push_back({sum.acc, saved, lanes});
    }
    return out;
  }

  /// Adds the saved values to the accumulators (in that order: not reassociated).
  void finishSums(const std::vector<FreshSum> &fresh) {
    for (const FreshSum &f : fresh) {
      llvm::AllocaInst *slot = accSlots_[size_t(f.acc)];
      llvm::Type *t = slot->getAllocatedType();
      if (!f.lanes) {
        b_.CreateStore(b_.CreateFAdd(f.saved, b_.CreateLoad(t, slot)), slot);
        continue;
      }
      emitCountedLoop(
          b_.getInt64(0), f.lanes,
          [&](Value *l) {
            Value *p = b_.CreateInBoundsGEP(t, slot, l);
            Value *old = b_.CreateLoad(t, b_.CreateInBoundsGEP(t, f.saved, l));
            b_.CreateStore(b_.CreateFAdd(old, b_.CreateLoad(t, p)), p);
          },
          1, true);
    }
  }

  /// Whether every loop variable `e` reads is bound here and is not `inner`'s.
  bool boundOutside(const Expr &e, int64_t inner) {
    if (!e) return true;
    if (e->kind == ExprKind::Var && (e->index == inner || !vars_[size_t(e->index)])) return false;
    for (const Expr &a : e->args)
      if (!boundOutside(a, inner)) return false;
    return true;
  }

  /// The loop `for i in [start, n)` itself.
  void emitLoop(const Stmt &s, Value *start, Value *n) {
    BasicBlock *pre = b_.GetInsertBlock();
    BasicBlock *header = BasicBlock::Create(ctx_, "loop" + std::to_string(s.index), fn_);
    BasicBlock *body = BasicBlock::Create(ctx_, "body" + std::to_string(s.index), fn_);
    BasicBlock *exit = BasicBlock::Create(ctx_, "exit" + std::to_string(s.index), fn_);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    llvm::PHINode *iv = b_.CreatePHI(b_.getInt64Ty(), 2, "i" + std::to_string(s.index));
    iv->addIncoming(start, pre);
    b_.CreateCondBr(b_.CreateICmpSLT(iv, n), body, exit);
    b_.SetInsertPoint(body);
    vars_[size_t(s.index)] = iv;
    stmts(s.body);
    vars_[size_t(s.index)] = nullptr;
    Value *next = b_.CreateAdd(iv, b_.getInt64(1), "", /*HasNUW=*/true, /*HasNSW=*/true);
    llvm::BranchInst *latch = b_.CreateBr(header);
    bool reduces = false, laneReduce = false; // laneReduce: into a lane of an accumulator array
    for (const Stmt &b : s.body)
      if (b.kind == StmtKind::Reduce) {
        reduces = true;
        laneReduce |= b.b != nullptr;
      }
    // A lane loop (an outer reduction's accumulator array, lane-indexed) of 16 to 128 lanes, a
    // multiple of 16: vectorized 16 wide and interleaved to its whole extent, it runs once per
    // row, and LLVM keeps the accumulators in registers across the reduced loops instead of
    // loading and storing them for every row (channels-last BN mean [8,56,56,64], one thread:
    // 244 -> 80 us, eager 113).
    int64_t laneVectors = 0;
    if (laneReduce && s.a && s.a->kind == ExprKind::Const && s.a->ival % 16 == 0 &&
        s.a->ival <= 128)
      laneVectors = s.a->ival / 16;
    latch->setMetadata(llvm::LLVMContext::MD_loop, loopMetadata(s.vectorize, reduces, laneVectors));
    iv->addIncoming(next, b_.GetInsertBlock());
    b_.SetInsertPoint(exit);
  }

  llvm::MDNode *loopMetadata(bool vectorize, bool reduces, int64_t laneVectors = 0) {
    llvm::SmallVector<llvm::Metadata *, 4> ops;
    ops.push_back(nullptr); // self reference
    ops.push_back(llvm::MDNode::get(ctx_, llvm::MDString::get(ctx_, "llvm.loop.mustprogress")));
    // No unrolling: with static extents LLVM would fully unroll outer loops around vectorized
    // inner loops, multiplying code size and compile time for no gain in bandwidth.
    ops.push_back(llvm::MDNode::get(ctx_, llvm::MDString::get(ctx_, "llvm.loop.unroll.disable")));
    auto hint = [&](const char *key, llvm::Constant *v) {
      ops.push_back(llvm::MDNode::get(
          ctx_, {llvm::MDString::get(ctx_, key), llvm::ConstantAsMetadata::get(v)}));
    };
    // A reduction loop's accumulator is a dependency chain: two interleaved vector accumulators
    // hide its latency (LLVM picks one for short rows; softmax over 128: 155 -> 138 us, layer
    // norm over 768: 37 -> 31 us; four were no better).
    if (vectorize && laneVectors > 0) {
      hint("llvm.loop.vectorize.width", b_.getInt32(16));
      hint("llvm.loop.interleave.count", b_.getInt32(int32_t(laneVectors)));
    } else if (vectorize && reduces) {
      hint("llvm.loop.interleave.count", b_.getInt32(2));
    }
    if (!vectorize) {
      // General strided loops: vectorizing them costs compile time for little gain.
      hint("llvm.loop.vectorize.enable", b_.getFalse());
      hint("llvm.loop.interleave.count", b_.getInt32(1));
    }
    llvm::MDNode *md = llvm::MDNode::getDistinct(ctx_, ops);
    md->replaceOperandWith(0, md);
    return md;
  }

  /// An accumulator's slot, or an array accumulator's element at `lane`.
  Value *accSlot(int64_t a, const Expr &lane) {
    llvm::AllocaInst *slot = accSlots_[size_t(a)];
    if (!lane) return slot;
    return b_.CreateInBoundsGEP(slot->getAllocatedType(), slot, indexExpr(lane));
  }

  BasicBlock *failBlock(int32_t code) {
    if (!fail_) {
      llvm::IRBuilderBase::InsertPointGuard guard(b_);
      fail_ = BasicBlock::Create(ctx_, "fail", fn_);
      b_.SetInsertPoint(fail_);
      failCode_ = b_.CreatePHI(b_.getInt32Ty(), 2, "code");
      b_.CreateRet(failCode_);
    }
    failCode_->addIncoming(b_.getInt32(uint32_t(code)), b_.GetInsertBlock());
    return fail_;
  }

  // ---- expressions ----

  /// Offsets and extents: element counts that never overflow, so + and * carry nsw, which lets
  /// scalar evolution see affine accesses.
  Value *indexExpr(const Expr &e) {
    const ExprNode &n = *e;
    bool arith = n.kind == ExprKind::Binary && n.dtype == DType::I64 &&
                 (BinaryOp(n.op) == BinaryOp::Add || BinaryOp(n.op) == BinaryOp::Mul ||
                  BinaryOp(n.op) == BinaryOp::Sub);
    if (!arith) return expr(e);
    if (auto it = indexMemo_.find(e.get()); it != indexMemo_.end()) return it->second;
    Value *a = indexExpr(n.args[0]), *c = indexExpr(n.args[1]), *r = nullptr;
    switch (BinaryOp(n.op)) {
    case BinaryOp::Add: r = b_.CreateAdd(a, c, "", false, true); break;
    case BinaryOp::Sub: r = b_.CreateSub(a, c, "", false, true); break;
    default: r = b_.CreateMul(a, c, "", false, true); break;
    }
    return indexMemo_[e.get()] = r;
  }

  Value *expr(const Expr &e) {
    if (auto it = memo_.find(e.get()); it != memo_.end()) return it->second;
    Value *v = exprUncached(*e);
    memo_[e.get()] = v;
    return v;
  }

  Value *exprUncached(const ExprNode &n) {
    switch (n.kind) {
    case ExprKind::Const: return constant(n);
    case ExprKind::Var: return vars_[size_t(n.index)];
    case ExprKind::Param: return params_[size_t(n.index)];
    case ExprKind::Size: return sizes_[size_t(n.index)][size_t(n.dim)];
    case ExprKind::Stride: return strides_[size_t(n.index)][size_t(n.dim)];
    case ExprKind::Load: {
      Value *ptr =
          b_.CreateGEP(memType(n.dtype), fn_->getArg(unsigned(n.index)), indexExpr(n.args[0]));
      Value *v = b_.CreateLoad(memType(n.dtype), ptr);
      return n.dtype == DType::Bool ? b_.CreateICmpNE(v, b_.getInt8(0)) : v;
    }
    case ExprKind::Acc:
      return b_.CreateLoad(regType(n.dtype),
                           accSlot(n.index, n.args.empty() ? nullptr : n.args[0]));
    case ExprKind::Unary: return unaryValue(UnaryOp(n.op), n.args[0]->dtype, expr(n.args[0]));
    case ExprKind::Binary:
      return binaryValue(BinaryOp(n.op), n.dtype, expr(n.args[0]), expr(n.args[1]),
                         n.args[1].get());
    case ExprKind::Compare:
      return compareValue(CmpOp(n.op), n.args[0]->dtype, expr(n.args[0]), expr(n.args[1]));
    case ExprKind::Select:
      return b_.CreateSelect(expr(n.args[0]), expr(n.args[1]), expr(n.args[2]));
    case ExprKind::Cast: return castValue(expr(n.args[0]), n.args[0]->dtype, n.dtype);
    }
    return nullptr;
  }

  Value *constant(const ExprNode &n) {
    switch (n.dtype) {
    case DType::F64: return llvm::ConstantFP::get(b_.getDoubleTy(), n.fval);
    case DType::F32: return llvm::ConstantFP::get(b_.getFloatTy(), double(float(n.fval)));
    case DType::F16:
      return castValue(llvm::ConstantFP::get(b_.getFloatTy(), double(float(n.fval))), DType::F32,
                       DType::F16);
    case DType::BF16: return b_.getInt16(floatToBFloat16(float(n.fval)));
    case DType::Bool: return b_.getInt1(n.ival != 0);
    default: return llvm::ConstantInt::get(regType(n.dtype), uint64_t(n.ival), /*IsSigned=*/true);
    }
  }

  // ---- conversions ----

  Value *bf16ToF32(Value *v) {
    return b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(v, b_.getInt32Ty()), 16), b_.getFloatTy());
  }

  /// Round to nearest even on the bits (xjit::floatToBFloat16); NaN stays a quiet NaN.
  Value *f32ToBf16(Value *f) {
    Value *bits = b_.CreateBitCast(f, b_.getInt32Ty());
    Value *lsb = b_.CreateAnd(b_.CreateLShr(bits, 16), b_.getInt32(1));
    Value *rounded = b_.CreateLShr(b_.CreateAdd(bits, b_.CreateAdd(lsb, b_.getInt32(0x7fff))), 16);
    Value *nan = b_.CreateOr(b_.CreateLShr(bits, 16), b_.getInt32(0x40));
    Value *r = b_.CreateSelect(b_.CreateFCmpUNO(f, f), nan, rounded);
    return b_.CreateTrunc(r, b_.getInt16Ty());
  }

  /// Tensor::to conversions (see kernel_ir.h).
  Value *castValue(Value *v, DType from, DType to) {
    if (from == to) return v;
    if (from == DType::F16) {
      v = b_.CreateFPExt(v, b_.getFloatTy());
      from = DType::F32;
    } else if (from == DType::BF16) {
      v = bf16ToF32(v);
      from = DType::F32;
    }
    if (to == DType::F16 || to == DType::BF16) {
      Value *f = castValue(v, from, DType::F32);
      return to == DType::F16 ? b_.CreateFPTrunc(f, b_.getHalfTy()) : f32ToBf16(f);
    }
    if (from == to) return v;
    llvm::Type *dst = regType(to);
    if (isFloating(from)) {
      if (isFloating(to))
        return to == DType::F64 ? b_.CreateFPExt(v, dst) : b_.CreateFPTrunc(v, dst);
      if (to == DType::Bool) return b_.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0));
      // NaN -> 0 and saturation at the int64 range, then wrap (Tensor::to).
      Value *i =
          b_.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {b_.getInt64Ty(), v->getType()}, {v});
      return to == DType::I64 ? i : b_.CreateTrunc(i, dst);
    }
    // From an integer or bool.
    if (isFloating(to)) {
      if (isUnsignedInt(from)) return b_.CreateUIToFP(v, dst);
      if (from == DType::I64 && to == DType::F32) // rounds through f64, like the reference
        return b_.CreateFPTrunc(b_.CreateSIToFP(v, b_.getDoubleTy()), dst);
      return b_.CreateSIToFP(v, dst);
    }
    if (to == DType::Bool) return b_.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
    return isUnsignedInt(from) ? b_.CreateZExtOrTrunc(v, dst) : b_.CreateSExtOrTrunc(v, dst);
  }

  // ---- math ----

  llvm::FunctionCallee libmFn(const char *name, unsigned arity) {
    llvm::Type *d = b_.getDoubleTy();
    std::vector<llvm::Type *> args(arity, d);
    llvm::FunctionCallee f = m_.getOrInsertFunction(name, llvm::FunctionType::get(d, args, false));
    if (auto *fn = llvm::dyn_cast<llvm::Function>(f.getCallee())) {
      // Pure functions of their arguments (errno is never read), so LICM may hoist them.
      fn->setDoesNotAccessMemory();
      fn->setDoesNotThrow();
      fn->setWillReturn();
    }
    return f;
  }

  /// A libm double function applied in f64 (f32 operands are widened and the result rounded).
  Value *viaLibm(const char *name, DType d, std::vector<Value *> args) {
    for (Value *&a : args)
      a = castValue(a, d, DType::F64);
    Value *r = b_.CreateCall(libmFn(name, unsigned(args.size())), args);
    return castValue(r, DType::F64, d);
  }

  Value *fconst(DType d, double v) { return llvm::ConstantFP::get(regType(d), v); }

  Value *unaryValue(UnaryOp op, DType d, Value *x) {
    bool f32 = d == DType::F32;
    switch (op) {
    case UnaryOp::Neg: return isFloating(d) ? b_.CreateFNeg(x) : b_.CreateNeg(x);
    case UnaryOp::Abs:
      if (isFloating(d)) return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
      if (isUnsignedInt(d)) return x;
      return b_.CreateSelect(b_.CreateICmpSLT(x, llvm::ConstantInt::get(x->getType(), 0)),
                             b_.CreateNeg(x), x);
    case UnaryOp::Not: return b_.CreateNot(x);
    case UnaryOp::Floor: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, x);
    case UnaryOp::Ceil: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::ceil, x);
    case UnaryOp::Trunc: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::trunc, x);
    case UnaryOp::RoundEven: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::roundeven, x);
    case UnaryOp::Sqrt: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x);
    case UnaryOp::Rsqrt:
      return b_.CreateFDiv(fconst(d, 1.0), b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x));
    case UnaryOp::Reciprocal: return b_.CreateFDiv(fconst(d, 1.0), x);
    case UnaryOp::Exp: return f32 ? math::expF32(b_, x) : viaLibm("exp", d, {x});
    case UnaryOp::Log: return f32 ? math::logF32(b_, x) : viaLibm("log", d, {x});
    case UnaryOp::Log1p: return f32 ? math::log1pF32(b_, x) : viaLibm("log1p", d, {x});
    case UnaryOp::Expm1: return f32 ? math::expm1F32(b_, x) : viaLibm("expm1", d, {x});
    case UnaryOp::Tanh: return f32 ? math::tanhF32(b_, x) : viaLibm("tanh", d, {x});
    case UnaryOp::Erf: return f32 ? math::erfF32(b_, x) : viaLibm("erf", d, {x});
    case UnaryOp::Sin: return f32 ? math::sinF32(b_, x) : viaLibm("sin", d, {x});
    case UnaryOp::Cos: return f32 ? math::cosF32(b_, x) : viaLibm("cos", d, {x});
    case UnaryOp::Sigmoid:
      if (f32) return math::sigmoidF32(b_, x);
      // f64: the reference's formula, with libm's exp.
      return b_.CreateFDiv(fconst(d, 1.0),
                           b_.CreateFAdd(fconst(d, 1.0), viaLibm("exp", d, {b_.CreateFNeg(x)})));
    case UnaryOp::IsNan: return b_.CreateFCmpUNO(x, x);
    case UnaryOp::IsInf:
      return b_.CreateFCmpOEQ(b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x),
                              fconst(d, INFINITY));
    case UnaryOp::SignBit: {
      llvm::Type *it = b_.getIntNTy(x->getType()->getPrimitiveSizeInBits());
      return b_.CreateICmpSLT(b_.CreateBitCast(x, it), llvm::ConstantInt::get(it, 0));
    }
    default:
      if (const char *name = libmName(op)) return viaLibm(name, d, {x});
    }
    throw Error(ErrorKind::Internal, "codegen: unhandled unary op " + std::string(unaryOpName(op)));
  }

  /// Integer division and remainder: a zero divisor stops the kernel (ZeroDivisionError), and a
  /// divisor of -1 is done without the division (INT_MIN / -1 traps on x86; the IR wraps).
  Value *intDivRem(bool rem, DType d, Value *a, Value *c) {
    llvm::Type *t = a->getType();
    Value *zero = llvm::ConstantInt::get(t, 0);
    BasicBlock *ok = BasicBlock::Create(ctx_, "div.ok", fn_);
    b_.CreateCondBr(b_.CreateICmpEQ(c, zero), failBlock(kErrorDivByZero), ok);
    b_.SetInsertPoint(ok);
    if (isUnsignedInt(d)) return rem ? b_.CreateURem(a, c) : b_.CreateUDiv(a, c);
    Value *minusOne = b_.CreateICmpEQ(c, llvm::ConstantInt::get(t, -1, true));
    Value *safe = b_.CreateSelect(minusOne, llvm::ConstantInt::get(t, 1), c);
    Value *r = rem ? b_.CreateSRem(a, safe) : b_.CreateSDiv(a, safe);
    return b_.CreateSelect(minusOne, rem ? zero : b_.CreateNeg(a), r);
  }

  Value *binaryValue(BinaryOp op, DType d, Value *a, Value *c, const ExprNode *rhs = nullptr) {
    bool fl = isFloating(d);
    switch (op) {
    case BinaryOp::Add: return fl ? b_.CreateFAdd(a, c) : b_.CreateAdd(a, c);
    case BinaryOp::Sub: return fl ? b_.CreateFSub(a, c) : b_.CreateSub(a, c);
    case BinaryOp::Mul: return fl ? b_.CreateFMul(a, c) : b_.CreateMul(a, c);
    case BinaryOp::Div: return fl ? b_.CreateFDiv(a, c) : intDivRem(false, d, a, c);
    case BinaryOp::Rem: return fl ? b_.CreateFRem(a, c) : intDivRem(true, d, a, c);
    case BinaryOp::Max:
    case BinaryOp::Min: {
      bool mx = op == BinaryOp::Max;
      if (d == DType::Bool) return mx ? b_.CreateOr(a, c) : b_.CreateAnd(a, c);
      if (!fl) {
        Value *gt = isUnsignedInt(d) ? (mx ? b_.CreateICmpUGT(a, c) : b_.CreateICmpULT(a, c))
                                     : (mx ? b_.CreateICmpSGT(a, c) : b_.CreateICmpSLT(a, c));
        return b_.CreateSelect(gt, a, c);
      }
      Value *pick = b_.CreateSelect(mx ? b_.CreateFCmpOGT(a, c) : b_.CreateFCmpOLT(a, c), a, c);
      return b_.CreateSelect(b_.CreateFCmpUNO(a, c), fconst(d, NAN), pick);
    }
    case BinaryOp::Pow:
      if (!fl) {
        auto ext = [&](Value *v) {
          return isUnsignedInt(d) ? b_.CreateZExt(v, b_.getInt64Ty())
                                  : b_.CreateSExtOrTrunc(v, b_.getInt64Ty());
        };
        llvm::FunctionCallee f = m_.getOrInsertFunction(kIntPowSymbol, b_.getInt64Ty(),
                                                        b_.getInt64Ty(), b_.getInt64Ty());
        if (auto *fn = llvm::dyn_cast<llvm::Function>(f.getCallee())) {
          fn->setDoesNotAccessMemory();
          fn->setDoesNotThrow();
        }
        return b_.CreateTrunc(b_.CreateCall(f, {ext(a), ext(c)}), a->getType());
      }
      // x ** 2 is the correctly rounded square either way; f32 powers inline powF32, f64 use libm.
      if (rhs && rhs->kind == ExprKind::Const && rhs->fval == 2.0) return b_.CreateFMul(a, a);
      return d == DType::F32 ? math::powF32(b_, a, c) : viaLibm("pow", d, {a, c});
    case BinaryOp::Atan2:
      return d == DType::F32 ? math::atan2F32(b_, a, c) : viaLibm("atan2", d, {a, c});
    case BinaryOp::Hypot: return viaLibm("hypot", d, {a, c});
    case BinaryOp::CopySign: return b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, a, c);
    case BinaryOp::And: return b_.CreateAnd(a, c);
    case BinaryOp::Or: return b_.CreateOr(a, c);
    case BinaryOp::Xor: return b_.CreateXor(a, c);
    }
    throw Error(ErrorKind::Internal,
                "codegen: unhandled binary op " + std::string(binaryOpName(op)));
  }

  Value *compareValue(CmpOp op, DType d, Value *a, Value *c) {
    using P = llvm::CmpInst::Predicate;
    if (isFloating(d)) {
      static constexpr P fp[] = {P::FCMP_OEQ, P::FCMP_UNE, P::FCMP_OLT,
                                 P::FCMP_OLE, P::FCMP_OGT, P::FCMP_OGE};
      return b_.CreateFCmp(fp[size_t(op)], a, c);
    }
    static constexpr P sp[] = {P::ICMP_EQ,  P::ICMP_NE,  P::ICMP_SLT,
                               P::ICMP_SLE, P::ICMP_SGT, P::ICMP_SGE};
    static constexpr P up[] = {P::ICMP_EQ,  P::ICMP_NE,  P::ICMP_ULT,
                               P::ICMP_ULE, P::ICMP_UGT, P::ICMP_UGE};
    return b_.CreateICmp(isUnsignedInt(d) ? up[size_t(op)] : sp[size_t(op)], a, c);
  }

  const Kernel &k_;
  const bool inPlace_; // an output shares an input's memory (BufferParam::aliasOf)
  std::string symbol_;
  int numTasks_ = 0;
  llvm::Module &m_;
  llvm::LLVMContext &ctx_;
  llvm::IRBuilder<> b_;
  llvm::Function *fn_ = nullptr;
  std::vector<std::vector<Value *>> sizes_, strides_;
  std::vector<Value *> params_, vars_;
  std::vector<llvm::AllocaInst *> accSlots_;
  BasicBlock *fail_ = nullptr;
  llvm::PHINode *failCode_ = nullptr;
  std::unordered_map<const ExprNode *, Value *> memo_, indexMemo_;
};

} // namespace

std::unique_ptr<llvm::Module> emitKernelModule(const Kernel &k, const std::string &symbol,
                                               llvm::LLVMContext &ctx) {
  verifyKernelOrThrow(k);
  auto m = std::make_unique<llvm::Module>(symbol, ctx);
  Emitter(k, *m).emit(symbol);
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyModule(*m, &os))
    throw Error(ErrorKind::Internal,
                "codegen produced invalid LLVM IR for kernel " + k.name + ": " + os.str());
  return m;
}

} // namespace xjit::backend
