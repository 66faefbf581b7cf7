#include "cache.h"

#include "xjit/ir/op_registry.h"

#include <unordered_set>

namespace xjit::frontend {

namespace {

Py_ssize_t gExtraIndex = -1;
CodeCache gSkipped; // the shared marker; never freed
// Live caches, for resetAllCaches. Code objects free theirs through freeExtra.
std::unordered_set<CodeCache *> gLive;

void freeExtra(void *p) {
  auto *c = static_cast<CodeCache *>(p);
  if (!c || c == &gSkipped) return;
  gLive.erase(c);
  delete c;
}

} // namespace

CompiledEntry::~CompiledEntry() {
  for (int64_t id : externalIds)
    unregisterExternalFunction(id);
}

void initCodeExtra() {
  if (gExtraIndex >= 0) return;
  gExtraIndex = _PyEval_RequestCodeExtraIndex(freeExtra);
  if (gExtraIndex < 0) {
    PyErr_SetString(PyExc_RuntimeError, "xjit: no free co_extra slot for the frame cache");
    throw PyErrorSet();
  }
}

CodeCache *lookupCache(PyCodeObject *code) {
  void *p = nullptr;
  if (_PyCode_GetExtra(reinterpret_cast<PyObject *>(code), gExtraIndex, &p) != 0) {
    PyErr_Clear();
    return &gSkipped;
  }
  return static_cast<CodeCache *>(p);
}

bool isSkippedMarker(const CodeCache *c) { return c == &gSkipped; }

void markSkipped(PyCodeObject *code) {
  CodeCache *old = lookupCache(code);
  if (old == &gSkipped) return;
  if (_PyCode_SetExtra(reinterpret_cast<PyObject *>(code), gExtraIndex, &gSkipped) != 0) {
    PyErr_Clear();
    return;
  }
  freeExtra(old);
}

CodeCache &ensureCache(PyCodeObject *code) {
  CodeCache *c = lookupCache(code);
  if (c && c != &gSkipped) return *c;
  auto fresh = std::make_unique<CodeCache>();
  if (_PyCode_SetExtra(reinterpret_cast<PyObject *>(code), gExtraIndex, fresh.get()) != 0)
    throw PyErrorSet();
  gLive.insert(fresh.get());
  return *fresh.release();
}

void resetAllCaches() {
  for (CodeCache *c : gLive) {
    // Entries still running keep themselves alive through their shared_ptr copies.
    bool forceRoot = c->forceRoot, libraryRoot = c->libraryRoot;
    *c = CodeCache();
    c->forceRoot = forceRoot;
    c->libraryRoot = libraryRoot;
  }
}

} // namespace xjit::frontend
