// Graph IR data structures: values with use lists, ops in intrusive block lists, graphs.
#include "xjit/ir/ir.h"

#include "xjit/ir/op_registry.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

namespace xjit {

std::string SourceLoc::str() const {
  if (!known()) return "<unknown>";
  std::string out = file + ":" + std::to_string(line);
  if (!function.empty()) out += " (" + function + ")";
  return out;
}

// ---- Value ----
void Value::replaceAllUsesWith(Value *other) {
  if (other == this) return;
  while (!uses_.empty()) {
    Use u = uses_.back();
    u.user->setOperand(u.index, other);
  }
}

static void removeUse(Value *v, Op *user, unsigned index) {
  auto &uses = const_cast<std::vector<Use> &>(v->uses());
  for (size_t i = uses.size(); i-- > 0;)
    if (uses[i].user == user && uses[i].index == index) {
      uses[i] = uses.back();
      uses.pop_back();
      return;
    }
}

static void addUse(Value *v, Op *user, unsigned index) {
  const_cast<std::vector<Use> &>(v->uses()).push_back({user, index});
}

// ---- Block ----
// Clears the operands of every op in b and below, so ops can then be destroyed in any order
// (a nested op may use a value defined earlier in an enclosing block).
static void dropAllReferences(Block *b) {
  for (Op *op = b->front(); op; op = op->next()) {
    op->setOperands({});
    for (size_t r = 0; r < op->numRegions(); ++r) dropAllReferences(op->region(r));
  }
}

Block::~Block() {
  dropAllReferences(this);
  for (Op *op = first_; op;) {
    Op *next = op->next_;
    delete op;
    op = next;
  }
}

Value *Block::addArgument(Type t, std::string name) {
  auto v = std::unique_ptr<Value>(new Value(std::move(t), nullptr, this, args_.size()));
  v->setName(std::move(name));
  args_.push_back(std::move(v));
  return args_.back().get();
}

void Block::eraseArgument(size_t i) {
  if (args_.at(i)->hasUses()) throw std::logic_error("erasing a block argument that has uses");
  args_.erase(args_.begin() + static_cast<ptrdiff_t>(i));
  for (size_t j = i; j < args_.size(); ++j) args_[j]->index_ = static_cast<unsigned>(j);
}

size_t Block::size() const {
  size_t n = 0;
  for (Op *op = first_; op; op = op->next_) ++n;
  return n;
}

Op *Block::terminator() const {
  return last_ && last_->def().has(kTerminator) ? last_ : nullptr;
}

Op *Block::insert(std::unique_ptr<Op> owned, Op *before) {
  Op *op = owned.release();
  if (op->block_) throw std::logic_error("inserting an op that is already in a block");
  op->block_ = this;
  if (!before) {
    op->prev_ = last_;
    op->next_ = nullptr;
    (last_ ? last_->next_ : first_) = op;
    last_ = op;
  } else {
    if (before->block_ != this) throw std::logic_error("insertion point is in another block");
    op->next_ = before;
    op->prev_ = before->prev_;
    (before->prev_ ? before->prev_->next_ : first_) = op;
    before->prev_ = op;
  }
  return op;
}

std::unique_ptr<Op> Block::remove(Op *op) {
  if (op->block_ != this) throw std::logic_error("removing an op from another block");
  (op->prev_ ? op->prev_->next_ : first_) = op->next_;
  (op->next_ ? op->next_->prev_ : last_) = op->prev_;
  op->prev_ = op->next_ = nullptr;
  op->block_ = nullptr;
  return std::unique_ptr<Op>(op);
}

void Block::erase(Op *op) {
  for (const auto &r : op->results())
    if (r->hasUses()) throw std::logic_error("erasing " + op->describe() + " whose result has uses");
  remove(op); // unique_ptr destroys it
}

Block::Iterator &Block::Iterator::operator++() {
  cur = cur->next();
  return *this;
}

// ---- Op ----
Op::Op(const OpDef *def, std::vector<Value *> operands, std::vector<Type> resultTypes,
       AttrMap attrs, SourceLoc loc)
    : def_(def), attrs_(std::move(attrs)), loc_(std::move(loc)) {
  if (!def_) throw std::logic_error("Op created without an OpDef");
  setOperands(std::move(operands));
  for (auto &t : resultTypes) addResult(std::move(t));
  for (int i = 0; i < def_->numRegions; ++i) addRegion();
}

Op::~Op() {
  setOperands({});
  regions_.clear(); // nested ops drop their uses of our results' siblings first
}

const std::string &Op::name() const { return def_->name; }

void Op::setOperand(size_t i, Value *v) {
  Value *old = operands_.at(i);
  if (old == v) return;
  if (old) removeUse(old, this, static_cast<unsigned>(i));
  operands_[i] = v;
  if (v) addUse(v, this, static_cast<unsigned>(i));
}

void Op::setOperands(std::vector<Value *> vs) {
  for (size_t i = 0; i < operands_.size(); ++i)
    if (operands_[i]) removeUse(operands_[i], this, static_cast<unsigned>(i));
  operands_ = std::move(vs);
  for (size_t i = 0; i < operands_.size(); ++i)
    if (operands_[i]) addUse(operands_[i], this, static_cast<unsigned>(i));
}

Value *Op::addResult(Type t) {
  results_.push_back(std::unique_ptr<Value>(
      new Value(std::move(t), this, nullptr, static_cast<unsigned>(results_.size()))));
  return results_.back().get();
}

void Op::eraseResult(size_t i) {
  if (results_.at(i)->hasUses()) throw std::logic_error("erasing a result that has uses");
  results_.erase(results_.begin() + static_cast<ptrdiff_t>(i));
  for (size_t j = i; j < results_.size(); ++j) results_[j]->index_ = static_cast<unsigned>(j);
}

const Attr &Op::attr(std::string_view k) const {
  if (const Attr *a = attrOrNull(k)) return *a;
  throw std::out_of_range(describe() + ": missing attribute '" + std::string(k) + "'");
}

const Attr *Op::attrOrNull(std::string_view k) const {
  if (auto it = attrs_.find(k); it != attrs_.end()) return &it->second;
  return def_->attrDefault(k);
}

void Op::removeAttr(std::string_view k) {
  if (auto it = attrs_.find(k); it != attrs_.end()) attrs_.erase(it);
}

Block *Op::addRegion() {
  regions_.push_back(std::make_unique<Block>());
  regions_.back()->parent_ = this;
  return regions_.back().get();
}

Op *Op::parentOp() const { return block_ ? block_->parentOp() : nullptr; }

bool Op::isInside(const Op *ancestor) const {
  for (const Op *op = this; op; op = op->parentOp())
    if (op == ancestor) return true;
  return false;
}

std::string Op::describe() const { return "'" + name() + "' at " + loc_.str(); }

// ---- Graph ----
Graph::Graph(std::string name) : name_(std::move(name)), body_(std::make_unique<Block>()) {}

std::vector<Value *> Graph::outputs() const {
  Op *ret = body_->terminator();
  return ret ? ret->operands() : std::vector<Value *>{};
}

std::vector<Type> Graph::outputTypes() const {
  std::vector<Type> out;
  for (Value *v : outputs()) out.push_back(v->type());
  return out;
}

size_t Graph::numOps() const {
  size_t n = 0;
  walk([&](Op *) { ++n; });
  return n;
}

namespace {
void cloneBlock(const Block &src, Block &dst, std::unordered_map<const Value *, Value *> &map);

std::unique_ptr<Op> cloneOp(const Op &op, std::unordered_map<const Value *, Value *> &map) {
  std::vector<Value *> operands;
  for (Value *v : op.operands()) {
    auto it = map.find(v);
    operands.push_back(it == map.end() ? v : it->second);
  }
  std::vector<Type> types;
  for (const auto &r : op.results())
    types.push_back(r->type());
  auto copy = std::make_unique<Op>(&op.def(), operands, types, op.attrs(), op.loc());
  for (size_t i = 0; i < op.numResults(); ++i) {
    copy->result(i)->setName(op.result(i)->name());
    map[op.result(i)] = copy->result(i);
  }
  for (size_t r = 0; r < op.numRegions(); ++r)
    cloneBlock(*op.region(r), *copy->region(r), map);
  return copy;
}

void cloneBlock(const Block &src, Block &dst, std::unordered_map<const Value *, Value *> &map) {
  for (const auto &a : src.arguments()) {
    Value *copy = dst.addArgument(a->type(), a->name());
    copy->setUnitDimHint(a->unitDimHint());
    map[a.get()] = copy;
  }
  for (Op *op : src)
    dst.push_back(cloneOp(*op, map));
}
} // namespace

std::vector<Value *> copyBlockOps(const Block &src, Block &dst, Op *before,
                                  std::unordered_map<const Value *, Value *> &map) {
  const Op *term = src.terminator();
  for (Op *op : src)
    if (op != term) dst.insert(cloneOp(*op, map), before);
  std::vector<Value *> out;
  if (term)
    for (Value *v : term->operands()) {
      auto it = map.find(v);
      out.push_back(it == map.end() ? v : it->second);
    }
  return out;
}

std::unique_ptr<Graph> Graph::clone() const {
  auto g = std::make_unique<Graph>(name_);
  std::unordered_map<const Value *, Value *> map;
  cloneBlock(*body_, *g->body(), map);
  return g;
}

} // namespace xjit
