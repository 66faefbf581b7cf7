// xjit-fuzz: generates seeded random graphs over the whole op registry and checks the
// verifier, the print/parse round trip and the interpreter on each (see random_graph.h).
#include "random_graph.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

int main(int argc, char **argv) {
  int64_t graphs = 10000;
  size_t show = 5;
  uint64_t seed = 1;
  xjit::testing::RandomGraphOptions opts;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char *flag) -> const char * {
      size_t n = std::strlen(flag);
      return a.compare(0, n, flag) == 0 ? argv[i] + n : nullptr;
    };
    if (const char *v = value("--graphs=")) graphs = std::atoll(v);
    else if (const char *v = value("--seed=")) seed = std::strtoull(v, nullptr, 10);
    else if (const char *v = value("--max-ops=")) opts.maxOps = std::atoi(v);
    else if (const char *v = value("--show=")) show = std::strtoull(v, nullptr, 10);
    else {
      std::fprintf(stderr, "usage: xjit-fuzz [--graphs=N] [--seed=S] [--max-ops=N] [--show=FAILURES]\n");
      return 1;
    }
  }
  auto start = std::chrono::steady_clock::now();
  auto stats = xjit::testing::fuzz(seed, graphs, opts, show);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto &m : stats.failureMessages) std::fprintf(stderr, "FAILURE %s\n\n", m.c_str());
  std::printf("xjit-fuzz: %lld graphs (%lld ops), %lld with inputs rejected by kernels, "
              "%lld failures, %.1f s\n",
              static_cast<long long>(stats.graphs), static_cast<long long>(stats.ops),
              static_cast<long long>(stats.rejectedInputs), static_cast<long long>(stats.failures),
              secs);
  return stats.failures ? 1 : 0;
}
