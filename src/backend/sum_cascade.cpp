// Which loops sum floats across their iterations, and the blocks of their cascade.
#include "sum_cascade.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

namespace xjit::backend {
namespace {

bool usesVar(const Expr &e, int64_t v) {
  if (!e) return false;
  if (e->kind == ExprKind::Var && e->index == v) return true;
  for (const Expr &a : e->args)
    if (usesVar(a, v)) return true;
  return false;
}

void accsRead(const Expr &e, std::set<int64_t> &out) {
  if (!e) return;
  if (e->kind == ExprKind::Acc) out.insert(e->index);
  for (const Expr &a : e->args)
    accsRead(a, out);
}

bool containsLoop(const StmtList &list) {
  for (const Stmt &s : list)
    if (s.kind == StmtKind::For || containsLoop(s.body) || containsLoop(s.orelse)) return true;
  return false;
}

struct SumWalk {
  const Kernel &k;
  int64_t loopVar;
  std::map<int64_t, const Stmt *> sums; // accumulator -> its lane loop (null: scalar / several)
  std::set<int64_t> excluded;

  void walk(const StmtList &list, const Stmt *enclosing) {
    for (const Stmt &s : list) {
      accsRead(s.a, excluded);
      accsRead(s.b, excluded);
      if (s.kind == StmtKind::InitAcc) excluded.insert(s.index);
      if (s.kind == StmtKind::Reduce) reduced(s, enclosing);
      walk(s.body, s.kind == StmtKind::For ? &s : enclosing);
      walk(s.orelse, enclosing);
    }
  }

  void reduced(const Stmt &s, const Stmt *enclosing) {
    const AccDecl &a = k.accs[size_t(s.index)];
    if (s.combine != BinaryOp::Add || (a.dtype != DType::F32 && a.dtype != DType::F64)) return;
    if (!a.lanes) {
      sums[s.index] = nullptr;
      return;
    }
    // A lane that moves with the loop (the lane loop itself) is not summed across it.
    if (usesVar(s.b, loopVar)) {
      excluded.insert(s.index);
      return;
    }
    bool laneLoop = enclosing && s.b->kind == ExprKind::Var && s.b->index == enclosing->index;
    auto [it, fresh] = sums.emplace(s.index, laneLoop ? enclosing : nullptr);
    if (!fresh && it->second != enclosing) it->second = nullptr;
  }
};

} // namespace

bool sumCascadeEnabled() {
  static const bool on = [] {
    const char *v = std::getenv("XJIT_SUM_CASCADE");
    return !v || std::strcmp(v, "0") != 0;
  }();
  return on;
}

std::vector<CascadedSum> cascadedSums(const Kernel &k, const Stmt &loop) {
  SumWalk w{k, loop.index, {}, {}};
  w.walk(loop.body, &loop);
  std::vector<CascadedSum> out;
  for (const auto &[acc, laneLoop] : w.sums)
    if (!w.excluded.count(acc)) out.push_back({acc, laneLoop});
  return out;
}

std::vector<int64_t> cascadeBlocks(const Stmt &loop) {
  // A scalar loop (not vectorized: the general version) has one partial sum, not 32.
  int64_t block = containsLoop(loop.body) || !loop.vectorize ? kSumFanIn : kSumBlock;
  bool isStatic = loop.a && loop.a->kind == ExprKind::Const;
  std::vector<int64_t> blocks;
  // (12 levels of 32 reach past any int64 extent.)
  for (int level = 0; level < (isStatic ? 12 : kSumLevels); ++level, block *= kSumFanIn) {
    if (isStatic && loop.a->ival <= block) break;
    blocks.insert(blocks.begin(), block);
  }
  return blocks;
}

} // namespace xjit::backend
