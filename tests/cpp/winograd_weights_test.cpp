// xjit's Winograd weight transform (src/backend/winograd_weights.cpp) against oneDNN's own
// reorder into the same `wino` descriptor: every format the AVX-512 Winograd kernels ask for
// (F(2x2,3x3) aaOio / aaOBiOo, F(4x4,3x3) OBaaIBOIio), channels that need padding, and
// descriptors the transform must leave to oneDNN.
#include "../../src/backend/winograd_weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <set>
#include <vector>

namespace xjit::backend::dnnl_kernels {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

struct Case {
  int64_t n, cin, cout, hw;
};

/// The weights descriptor oneDNN's Winograd convolution asks for, or none on machines without
/// its Winograd kernels (AVX-512 only).
std::optional<memory::desc> winogradWeightsDesc(const dnnl::engine &eng, const Case &c) {
  memory::dims src{c.n, c.cin, c.hw, c.hw}, wei{c.cout, c.cin, 3, 3}, dst{c.n, c.cout, c.hw, c.hw};
  auto any = [](const memory::dims &d) {
    return memory::desc(d, memory::data_type::f32, Tag::any);
  };
  try {
    dnnl::convolution_forward::primitive_desc pd({dnnl::prop_kind::forward_inference,
                                                  dnnl::algorithm::convolution_winograd,
                                                  any(src),
                                                  any(wei),
                                                  any(dst),
                                                  {1, 1},
                                                  {1, 1},
                                                  {1, 1}},
                                                 eng);
    return pd.weights_desc();
  } catch (const dnnl::error &) {
    return std::nullopt;
  }
}

TEST(WinogradWeights, MatchesOneDnnReorderOnEveryFormat) {
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::set<int> formats;
  // Batch 1 with few pixels picks F(2x2,3x3), batch 8 F(4x4,3x3); 5/20 channels pad to 16/32.
  for (const Case &c :
       {Case{1, 64, 64, 56}, Case{1, 256, 256, 14}, Case{1, 64, 128, 7}, Case{8, 64, 64, 56},
        Case{8, 128, 96, 28}, Case{1, 5, 7, 11}, Case{2, 20, 24, 9}, Case{1, 512, 512, 7}}) {
    SCOPED_TRACE(testing::Message() << c.n << "x" << c.cin << "->" << c.cout << " " << c.hw);
    std::optional<memory::desc> to = winogradWeightsDesc(eng, c);
    if (!to) GTEST_SKIP() << "no Winograd convolution on this machine";
    memory::desc from({c.cout, c.cin, 3, 3}, memory::data_type::f32, Tag::oihw);
    std::optional<WinogradWeightLayout> layout = planWinogradWeights(from, *to);
    ASSERT_TRUE(layout.has_value());
    formats.insert(layout->format);

    std::vector<float> w(static_cast<size_t>(c.cout * c.cin * 9));
    for (float &v : w)
      v = dist(rng);
    // Both destinations start as garbage: every element, padding included, must be written.
    std::vector<float> want(to->get_size() / sizeof(float), 777.f), got(want.size(), -555.f);
    memory src(from, eng, w.data()), dst(*to, eng, want.data());
    dnnl::reorder(src, dst).execute(stream, src, dst);
    stream.wait();
    transformWinogradWeights(*layout, w.data(), got.data());

    double maxAbs = 0, maxErr = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      maxAbs = std::max(maxAbs, double(std::fabs(want[i])));
      maxErr = std::max(maxErr, double(std::fabs(got[i] - want[i])));
    }
    // Same products summed in another order: float rounding apart.
    EXPECT_LE(maxErr, 1e-6 * maxAbs) << "max |want| " << maxAbs;
  }
  EXPECT_EQ(formats.size(), 3u) << "aaOio, aaOBiOo and OBaaIBOIio should all be covered";
}

TEST(WinogradWeights, LeavesOtherDescriptorsToOneDnn) {
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  std::optional<memory::desc> to = winogradWeightsDesc(eng, Case{1, 64, 64, 56});
  if (!to) GTEST_SKIP() << "no Winograd convolution on this machine";
  // Not dense OIHW (HWIO strides), not f32, or not a Winograd destination.
  memory::desc hwio({64, 64, 3, 3}, memory::data_type::f32, Tag::hwio);
  memory::desc bf16({64, 64, 3, 3}, memory::data_type::bf16, Tag::oihw);
  memory::desc oihw({64, 64, 3, 3}, memory::data_type::f32, Tag::oihw);
  memory::desc blocked({64, 64, 3, 3}, memory::data_type::f32, Tag::OIhw16i16o);
  EXPECT_FALSE(planWinogradWeights(hwio, *to).has_value());
  EXPECT_FALSE(planWinogradWeights(bf16, *to).has_value());
  EXPECT_FALSE(planWinogradWeights(oihw, blocked).has_value());
  EXPECT_TRUE(planWinogradWeights(oihw, *to).has_value());
}

} // namespace
} // namespace xjit::backend::dnnl_kernels
