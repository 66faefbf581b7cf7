// IR text format: printer/parser round trips, value naming, attribute and type text, parse
// error positions, the verifier through the C++ API, and a parser fuzz (prefixes and byte
// mutations must parse or throw ParseError, never crash).
#include "random_graph.h"
#include "xjit/ir/builder.h"
#include "xjit/ir/diagnostics.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/parser.h"
#include "xjit/ir/printer.h"
#include "xjit/ir/verifier.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

using namespace xjit;

namespace {

const char *kExample =
    R"(graph @forward(%x: f32[s0,128], %w: f32[128,64], %flag: bool) -> (f32[s0,64]) {
  %0 = matmul(%x, %w) : f32[s0,64] loc("model.py":12 "forward")
  %1 = add(%0, %0) {alpha = 1} : f32[s0,64] loc("model.py":13 "forward")
  %c = constant() {value = dense<f32[2]: [1.5, 2.0]>} : f32[2]
  %m:2 = sort(%1) {descending = true, dim = 1} : f32[s0,64], i64[s0,64]
  %r = if(%flag) : f32[s0,64] {
    yield(%m#0)
  } {
    %n = neg(%1) : f32[s0,64]
    yield(%n)
  }
  %true = constant() {value = true} : bool
  %trip = constant() {value = 3} : int
  %i0 = constant() {value = 0} : int
  %l:2 = loop(%trip, %true, %r, %i0) : f32[s0,64], int {
  ^(%iter: int, %acc: f32[s0,64], %k: int):
    %acc2 = add(%acc, %1) : f32[s0,64]
    %one = constant() {value = 1} : int
    %k2 = add(%k, %one) : int
    %cond = lt(%k2, %trip) : bool
    yield(%cond, %acc2, %k2)
  }
  return(%l#0)
}
)";

/// print(parse(text)), checking the parsed graph verifies.
std::string reprint(const std::string &text, bool verify = true) {
  auto g = parseGraph(text, "t.xir");
  if (verify) {
    auto errors = verifyGraph(*g);
    EXPECT_TRUE(errors.empty()) << errors.front();
  }
  return printGraph(*g);
}

/// The ParseError parsing `text` throws (fails the test if it does not throw).
ParseError parseError(const std::string &text) {
  try {
    parseModule(text, "t.xir");
  } catch (const ParseError &e) {
    return e;
  }
  ADD_FAILURE() << "no parse error for:\n" << text;
  return ParseError("t.xir", 0, 0, "");
}

std::string wrap(const std::string &body, const std::string &args = "%x: f32[2]",
                 const std::string &results = "") {
  return "graph @g(" + args + ") -> (" + results + ") {\n" + body + "\n}\n";
}

} // namespace

TEST(Text, ExampleRoundTripsExactly) {
  EXPECT_EQ(reprint(kExample), kExample);
  // Module form: several graphs separated by blank lines, each printed the same way.
  auto graphs = parseModule(std::string(kExample) + "\n" + kExample, "t.xir");
  ASSERT_EQ(graphs.size(), 2u);
  EXPECT_EQ(printGraph(*graphs[1]), kExample);
}

TEST(Text, ParsedStructure) {
  auto g = parseGraph(kExample);
  EXPECT_EQ(g->name(), "forward");
  ASSERT_EQ(g->numInputs(), 3u);
  EXPECT_EQ(g->input(0)->name(), "x");
  EXPECT_EQ(g->input(0)->type().str(), "f32[s0,128]");
  Op *matmul = g->body()->front();
  EXPECT_EQ(matmul->name(), "matmul");
  EXPECT_EQ(matmul->loc(), (SourceLoc{"model.py", 12, "forward"}));
  Op *add = matmul->next();
  EXPECT_EQ(add->attr("alpha"), Attr(int64_t{1}));
  Op *sort = add->next()->next();
  ASSERT_EQ(sort->numResults(), 2u);
  EXPECT_EQ(sort->result(1)->type().str(), "i64[s0,64]");
  Op *ifOp = sort->next();
  EXPECT_EQ(ifOp->region(0)->front()->operand(0), sort->result(0));
  // The loop body sees the loop's carried arguments and values from the graph body.
  Op *loop = g->body()->back()->operand(0)->definingOp();
  ASSERT_EQ(loop->name(), "loop");
  Block *body = loop->region(0);
  ASSERT_EQ(body->numArguments(), 3u);
  EXPECT_EQ(body->argument(1)->name(), "acc");
  EXPECT_EQ(body->front()->operand(1), add->result(0));
  EXPECT_EQ(g->outputs()[0], loop->result(0));
}

TEST(Text, NamesKeepUniqueHintsAndNumberTheRest) {
  Graph g("g");
  Type t = Type::tensor(DType::F32, {DimExpr(2)});
  Value *x = g.addInput(t, "x");
  Value *y = g.addInput(t, "1"); // a numeric hint: fresh numbers must skip it
  Builder b(g.body());
  Value *a = b.op("neg", {x});
  a->setName("dup");
  Value *c = b.op("neg", {a});
  c->setName("dup"); // not unique: both get numbers
  Value *d = b.op("add", {c, y});
  d->setName("with space/slash"); // sanitized to a valid name
  Value *e = b.op("relu", {d});   // no hint
  b.createWithTypes("return", {e}, {});
  std::string text = printGraph(g);
  EXPECT_EQ(text, "graph @g(%x: f32[2], %1: f32[2]) -> (f32[2]) {\n"
                  "  %0 = neg(%x) : f32[2]\n"
                  "  %2 = neg(%0) : f32[2]\n"
                  "  %with_space_slash = add(%2, %1) : f32[2]\n"
                  "  %3 = relu(%with_space_slash) : f32[2]\n"
                  "  return(%3)\n"
                  "}\n");
  EXPECT_EQ(reprint(text), text);
}

TEST(Text, MultiResultNamesAndGraphNames) {
  Graph g("not an identifier");
  Value *x = g.addInput(Type::tensor(DType::F32, {DimExpr(4), DimExpr(8)}));
  Builder b(g.body());
  Op *topk = b.create("topk", {x}, {{"k", int64_t{2}}});
  topk->result(0)->setName("values");
  topk->result(1)->setName("indices"); // a group is named after its first result
  b.createWithTypes("return", {topk->result(1), topk->result(0)}, {});
  std::string text = printGraph(g);
  EXPECT_EQ(text, "graph @\"not an identifier\"(%0: f32[4,8]) -> (i64[4,2], f32[4,2]) {\n"
                  "  %values:2 = topk(%0) {k = 2} : f32[4,2], i64[4,2]\n"
                  "  return(%values#1, %values#0)\n"
                  "}\n");
  auto parsed = parseGraph(text);
  EXPECT_EQ(parsed->name(), "not an identifier");
  EXPECT_EQ(printGraph(*parsed), text);
}

TEST(Text, AttributesRoundTripExactly) {
  Tensor half = Tensor::empty(DType::F16, {2, 2});
  half.setDouble(0, 0.1);
  half.setDouble(1, -std::numeric_limits<double>::infinity());
  half.setDouble(2, std::nan(""));
  half.setDouble(3, -0.0);
  Tensor ints = Tensor::empty(DType::I64, {3});
  ints.setInt(0, std::numeric_limits<int64_t>::min());
  ints.setInt(2, std::numeric_limits<int64_t>::max());
  Tensor flags = Tensor::empty(DType::Bool, {});
  flags.setInt(0, 1);
  std::string allBytes;
  for (int c = 1; c < 256; ++c)
    allBytes += static_cast<char>(c);
  AttrMap attrs = {
      {"i", int64_t{-5}},
      {"f", 0.1},
      {"tiny", 5e-324},
      {"negzero", -0.0},
      {"nan", std::nan("")},
      {"b", false},
      {"s", allBytes},
      {"ints", Attr::Ints{1, -2, 3}},
      {"floats", Attr::Floats{1.0, 1e100, -std::numeric_limits<double>::infinity()}},
      {"nofloats", Attr::Ints{}},
      {"dt", DType::BF16},
      {"ty", Type::tuple({Type::list(Type::intTy()), Type::tensor(DType::I8, {}, {"cuda", 1})})},
      {"half", half},
      {"ints_t", ints},
      {"flag", flags},
      {"mem.offset", Attr::Ints{0, 64}}, // annotation names hold dots
      {"not an identifier", int64_t{1}}, // printed quoted
  };
  Graph g("g");
  Op *op = g.body()->push_back(std::make_unique<Op>(&OpRegistry::instance().get("constant"),
                                                    std::vector<Value *>{},
                                                    std::vector<Type>{Type::intTy()}, attrs));
  g.body()->push_back(std::make_unique<Op>(&OpRegistry::instance().get("return"),
                                           std::vector<Value *>{op->result(0)},
                                           std::vector<Type>{}));
  std::string text = printGraph(g);
  auto parsed = parseGraph(text);
  const AttrMap &back = parsed->body()->front()->attrs();
  ASSERT_EQ(back.size(), attrs.size());
  for (const auto &[k, v] : attrs) {
    ASSERT_TRUE(back.count(k)) << k;
    EXPECT_EQ(back.at(k), v) << k << ": " << v.str() << " vs " << back.at(k).str();
  }
  EXPECT_EQ(printGraph(*parsed), text);
}

TEST(Text, EmptyListIsIntsUnlessTheOpDeclaresFloats) {
  auto g = parseGraph("graph @g() -> () {\n  return() {k = []}\n}\n");
  EXPECT_EQ(g->body()->front()->attr("k"), Attr(Attr::Ints{}));
  // Where an op declares a float-list attribute, `[]` reads back as an empty float list.
  for (const OpDef *def : OpRegistry::instance().all())
    for (const AttrSpec &spec : def->attrs)
      if (spec.kind == AttrKind::Floats) {
        Graph g("g");
        g.body()->push_back(std::make_unique<Op>(def, std::vector<Value *>{}, std::vector<Type>{},
                                                 AttrMap{{spec.name, Attr::Floats{}}}));
        auto parsed = parseGraph(printGraph(g));
        EXPECT_EQ(parsed->body()->front()->attr(spec.name), Attr(Attr::Floats{})) << def->name;
      }
}

TEST(Text, TypesRoundTripThroughParseType) {
  for (const char *text :
       {"f32[2,s0]", "f16[]@cuda:0", "bf16[0]@cuda", "i64[s0*4,(s0+1)//2,s0*s1+2]", "int", "float",
        "bool", "none", "str", "object", "tuple<>", "tuple<int, f32[3]>", "list<list<bool[1]>>",
        "u8[1,2,3,4,5,6,7,8]"}) {
    Type t = parseType(text);
    EXPECT_EQ(t.str(), text);
  }
  EXPECT_EQ(parseType("f32[ 4*s0 , 2 ]").str(), "f32[s0*4,2]");
  EXPECT_EQ(parseType("tuple<int,float>"), Type::tuple({Type::intTy(), Type::floatTy()}));
  EXPECT_THROW(parseType("f32[2"), ParseError);
  EXPECT_THROW(parseType("f32[2] int"), ParseError);
  EXPECT_THROW(parseType("tensor"), ParseError);
}

TEST(Text, PrintOptionsAndPrintOp) {
  auto g = parseGraph(kExample);
  PrintOptions noLocs;
  noLocs.printLocations = false;
  std::string text = printGraph(*g, noLocs);
  EXPECT_EQ(text.find("loc("), std::string::npos);
  EXPECT_EQ(printOp(*g->body()->front()),
            "%0 = matmul(%x, %w) : f32[s0,64] loc(\"model.py\":12 \"forward\")");
  Op *ifOp = g->body()->front()->next()->next()->next()->next();
  EXPECT_EQ(printOp(*ifOp), "%r = if(%flag) : f32[s0,64] {\n"
                            "  yield(%m#0)\n"
                            "} {\n"
                            "  %n = neg(%1) : f32[s0,64]\n"
                            "  yield(%n)\n"
                            "}");
}

TEST(Text, EmptyRegionAfterOperandsIsDisambiguated) {
  // A result-less op whose first region is empty prints an explicit `{}` attribute dictionary.
  Graph g("g");
  Value *c = g.addInput(Type::boolTy(), "c");
  Builder b(g.body());
  Op *ifOp = b.createWithTypes("if", {c}, {});
  Builder(ifOp->region(1)).createWithTypes("yield", {}, {});
  b.createWithTypes("return", {}, {});
  std::string text = printGraph(g);
  EXPECT_NE(text.find("if(%c) {} {\n  } {"), std::string::npos) << text;
  auto parsed = parseGraph(text);
  EXPECT_TRUE(parsed->body()->front()->region(0)->empty());
  EXPECT_EQ(printGraph(*parsed), text);
}

struct ErrorCase {
  std::string text;
  int line, col;
  std::string message;
};

TEST(Text, ParseErrorPositionsAndMessages) {
  std::vector<ErrorCase> cases = {
      {wrap("  %a = add(%x, %x : f32[2]"), 2, 19, "expected ')' after operands, found ':'"},
      {wrap("  %a = nope(%x) : f32[2]"), 2, 8, "unknown op 'nope'"},
      {wrap("  %a = neg(%y) : f32[2]\n  return(%a)"), 2, 12, "use of undefined value '%y'"},
      {wrap("  %x = neg(%x) : f32[2]"), 2, 3, "redefinition of '%x' (first defined at line 1)"},
      {wrap("  %a = neg(%x) : f32[2], f32[2]"), 2, 16, "expected 1 result type for '%a', found 2"},
      {wrap("  %a = neg(%x)\n  return(%a)"), 3, 3, "expected ':' and the result types of '%a'"},
      {wrap("", "%x: f32[2,s0+]"), 1, 23, "bad dimension 's0+'"},
      {wrap("", "%x: f32[2,,3]"), 1, 20, "expected a dimension, found ','"},
      {wrap("", "%x: f32[2;3]"), 1, 19, "expected ',' or ']' after a dimension, found ';'"},
      {wrap("", "%x: q8[2]"), 1, 14, "unknown dtype 'q8'"},
      {wrap("", "%x: tensor"), 1, 14, "unknown type 'tensor'"},
      {wrap("", "%x: f32"), 1, 17, "expected '[' after the dtype, found ')'"},
      {wrap("", "%x f32[2]"), 1, 13, "expected ':' after the argument name, found 'f32'"},
      {wrap("  %a = neg(%x) : f32[2] loc(\"m.py\" 3 \"f\")"), 2, 36,
       "expected ':' after the file name in loc(...), found '3'"},
      {wrap("  %a = neg(%x) : f32[2] loc(\"m.py"), 2, 29, "unterminated string"},
      {wrap("  %a = neg(%x) {s = \"a\\q\"} : f32[2]"), 2, 23, "unknown escape sequence '\\q'"},
      {wrap("  %a = neg(%x) {k = 99999999999999999999} : f32[2]"), 2, 21,
       "integer literal '99999999999999999999' out of range"},
      {wrap("  %a = neg(%x) {k = 1, k = 2} : f32[2]"), 2, 24, "duplicate attribute 'k'"},
      {wrap("  %a = neg(%x) {k = [1, true]} : f32[2]"), 2, 25, "expected a number in the list"},
      {wrap("  %a = neg(%x) {k = dense<f32[s0]: []>} : f32[2]"), 2, 27,
       "dense<...> needs a static shape"},
      {wrap("  %a = neg(%x) {k = dense<f32[3]: [1.0, 2.0, 3.0, 4.0]>} : f32[2]"), 2, 51,
       "dense tensor has more than 3 elements in dimension 0"},
      {wrap("  %a = neg(%x) {k = dense<bool[1]: [1]>} : f32[2]"), 2, 37,
       "expected 'true' or 'false', found '1'"},
      {wrap("  %a = neg(%x) {k = dense<i32[1]: [1.5]>} : f32[2]"), 2, 36,
       "expected an integer element for i32, found '1.5'"},
      {wrap("  %a = neg(%x) {k = dense<f32[99999999]: []>} : f32[2]"), 2, 27,
       "has more elements than the text"},
      {wrap("  %m:2 = neg(%x) : f32[2], f32[2]\n  return(%m)"), 3, 10,
       "'%m' has 2 results; refer to one as '%m#0'"},
      {wrap("  %a = neg(%x#0) : f32[2]"), 2, 12, "'%x' is a single value"},
      {wrap("  %a#1 = neg(%x) : f32[2]"), 2, 3, "a result name takes no '#N'"},
      {wrap("  %m:0 = neg(%x) : f32[2]"), 2, 6, "result count must be in 1..4096"},
      {wrap("  return(%x) {} {\n  }"), 2, 17, "'return' takes 0 regions, found more"},
      {wrap("  %a = neg(%x) : f32[2]\n  return(%a)", "%x: f32[2]", "f32[3]"), 1, 22,
       "graph @g declares result types (f32[3]) but its return has (f32[2])"},
      {"graph @g() -> () {\n  return()\n}\nfoo", 4, 1, "expected 'graph', found 'foo'"},
      {"graph g() -> ()", 1, 7, "expected '@' before the graph name, found 'g'"},
      {"graph @g() (", 1, 12, "expected '->' after the graph arguments, found '('"},
      {"graph @g() -> () {\n  %a = neg(%", 2, 13, "expected a value name after '%'"},
      {"graph @g() -> () {\n  \x01", 2, 3, "unexpected character '\\x01'"},
      {"graph @g() -> () {\n  12abc", 2, 5, "unexpected character 'a' in number"},
  };
  for (const ErrorCase &c : cases) {
    ParseError e = parseError(c.text);
    EXPECT_EQ(e.line(), c.line) << c.text << "\n" << e.what();
    EXPECT_EQ(e.col(), c.col) << c.text << "\n" << e.what();
    EXPECT_NE(e.message().find(c.message), std::string::npos) << c.text << "\n" << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("t.xir:" + std::to_string(c.line) + ":", 0), 0u)
        << e.what();
  }
}

TEST(Text, DeepNestingIsAnErrorNotACrash) {
  std::string deep = "graph @g(%x: ";
  for (int i = 0; i < 100000; ++i)
    deep += "list<";
  EXPECT_THROW(parseModule(deep), ParseError);
  std::string rank = "graph @g() -> () {\n  %c = constant() {value = dense<f32[";
  for (int i = 0; i < 2000; ++i)
    rank += "1,";
  rank += "1]: ";
  for (int i = 0; i < 2001; ++i)
    rank += "[";
  EXPECT_THROW(parseModule(rank), ParseError);
  EXPECT_THROW(parseType("f32[" + std::string(100000, '(') + "]"), ParseError);
  EXPECT_THROW(parseType("f32[" + std::string(100000, '-') + "1]"), ParseError);
}

// ---- verifier through the API ----

TEST(Verifier, ReportsOpAndLocation) {
  auto g = parseGraph(wrap("  %a = add(%x, %x) : f32[3] loc(\"model.py\":3 \"f\")\n  return(%a)",
                           "%x: f32[4]", "f32[3]"));
  auto errors = verifyGraph(*g);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0],
            "'add' at model.py:3 (f): result type f32[3] does not match inferred f32[4]");
  try {
    verifyOrThrow(*g);
    FAIL() << "expected VerifyError";
  } catch (const VerifyError &e) {
    EXPECT_EQ(std::string(e.what()), errors[0]);
    EXPECT_EQ(e.kind(), ErrorKind::User);
  }
  auto diags = verifyGraphDiagnostics(*g);
  ASSERT_EQ(diags.size(), 1u);
  EXPECT_EQ(diags[0].op, g->body()->front());
}

TEST(Verifier, AUnitDimHintOutsideItsInputsRank) {
  auto g = parseGraph(wrap("  return(%x)", "%x: f32[4,3] {unit_dim = 0}", "f32[4,3]"));
  EXPECT_TRUE(verifyGraph(*g).empty());
  EXPECT_NE(printGraph(*g).find("%x: f32[4,3] {unit_dim = 0}"), std::string::npos);
  g->input(0)->setUnitDimHint(2); // a pass that changed the rank would leave one
  auto errors = verifyGraph(*g);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "graph @g: argument #0 unit_dim 2 is not a dim of f32[4,3]");
}

TEST(Verifier, UseBeforeDefinitionAfterMovingAnOp) {
  auto g = parseGraph(wrap("  %a = neg(%x) : f32[2]\n  %b = relu(%a) : f32[2]\n  return(%b)",
                           "%x: f32[2]", "f32[2]"));
  EXPECT_TRUE(verifyGraph(*g).empty());
  Block *body = g->body();
  Op *relu = body->front()->next();
  body->insert(body->remove(relu), body->front()); // relu now precedes its operand's definition
  auto errors = verifyGraph(*g);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("'relu' at <unknown>: operand #0 (%a) is used before its definition"),
            std::string::npos)
      << errors[0];
}

TEST(Verifier, ValueFromAnotherGraph) {
  auto g1 = parseGraph(wrap("  return(%x)", "%x: f32[2]", "f32[2]"));
  auto g2 = parseGraph(wrap("  return(%x)", "%x: f32[2]", "f32[2]"));
  g2->body()->front()->setOperand(0, g1->input(0));
  auto errors = verifyGraph(*g2);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("is not defined in this graph"), std::string::npos) << errors[0];
  g2->body()->front()->setOperand(0, g2->input(0));
}

TEST(Verifier, ExtraRegionAndMissingAttribute) {
  auto g = parseGraph(wrap("  %a = reshape(%x) {shape = [2, 1]} : f32[2,1]\n  return(%a)",
                           "%x: f32[2]", "f32[2,1]"));
  Op *reshape = g->body()->front();
  reshape->removeAttr("shape");
  reshape->addRegion();
  auto errors = verifyGraph(*g);
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_NE(errors[0].find("missing required attribute 'shape'"), std::string::npos);
  EXPECT_NE(errors[1].find("expects 0 regions, has 1"), std::string::npos);
  EXPECT_NE(errors[2].find("region #0 must end in 'yield', it is empty"), std::string::npos);
}

// ---- fuzz: malformed text never crashes the parser ----

namespace {
/// Parses, and if that succeeds, verifies and checks the printed text is a fixed point.
void parseAnything(const std::string &text) {
  std::vector<std::unique_ptr<Graph>> graphs;
  try {
    graphs = parseModule(text, "fuzz.xir");
  } catch (const ParseError &e) {
    EXPECT_GE(e.line(), 1);
    EXPECT_GE(e.col(), 1);
    return;
  }
  for (const auto &g : graphs) {
    verifyGraph(*g);
    std::string printed = printGraph(*g);
    auto again = parseGraph(printed, "printed.xir");
    EXPECT_EQ(printGraph(*again), printed) << "input:\n" << text;
  }
}

std::vector<std::string> fuzzSeeds() {
  std::vector<std::string> seeds = {kExample};
  for (uint64_t seed = 1; seed <= 3; ++seed)
    seeds.push_back(printGraph(*xjit::testing::randomGraph(seed).graph));
  return seeds;
}
} // namespace

TEST(TextFuzz, EveryPrefixParsesOrFailsCleanly) {
  for (const std::string &text : fuzzSeeds())
    for (size_t n = 0; n <= text.size(); ++n)
      parseAnything(text.substr(0, n));
}

TEST(TextFuzz, RandomMutationsParseOrFailCleanly) {
  std::mt19937_64 rng(42);
  const std::string alphabet = "%#:=,(){}[]<>@^-\"\\/ \n0123456789.eabfisx_";
  for (const std::string &seed : fuzzSeeds()) {
    for (int round = 0; round < 600; ++round) {
      std::string text = seed;
      int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !text.empty(); ++e) {
        size_t pos = rng() % text.size();
        switch (rng() % 4) {
        case 0: text[pos] = static_cast<char>(rng() % 256); break; // random byte
        case 1: text[pos] = alphabet[rng() % alphabet.size()]; break;
        case 2: text.erase(pos, 1 + rng() % 8); break;
        default: text.insert(pos, 1, alphabet[rng() % alphabet.size()]); break;
        }
      }
      parseAnything(text);
    }
  }
}
