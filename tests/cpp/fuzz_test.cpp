// A bounded fuzzing run inside `make test`; `make fuzz` runs a longer one.
#include "random_graph.h"

#include <gtest/gtest.h>

TEST(Fuzz, RandomGraphsRoundTripVerifyAndInterpret) {
  auto stats = xjit::testing::fuzz(/*firstSeed=*/1000000, /*count=*/1500);
  for (const auto &m : stats.failureMessages) ADD_FAILURE() << m;
  EXPECT_EQ(stats.failures, 0);
  EXPECT_GT(stats.ops, stats.graphs * 3); // the generator produces real graphs, not empty ones
}
