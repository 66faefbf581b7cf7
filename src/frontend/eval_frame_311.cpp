// The CPython 3.11 layer of the frame hook: reads _PyInterpreterFrame (internal headers) and
// installs the PEP 523 function. When it returns a value without evaluating the frame, the
// caller (_PyEval_Vector) still clears and pops the frame, so locals are released as usual.
// Other versions get their own file beside this one (frame layout and entry state differ).
#include "eval_frame.h"

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000

#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

namespace xjit::frontend {

namespace {

struct DefaultCtx {
  PyThreadState *tstate;
  _PyInterpreterFrame *frame;
  int throwflag;
};

PyObject *evalDefault(void *p) {
  auto *c = static_cast<DefaultCtx *>(p);
  return _PyEval_EvalFrameDefault(c->tstate, c->frame, c->throwflag);
}

PyObject *evalFrame(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag) {
  // Exceptions thrown into a frame, frames owned by generators, and threads being traced
  // (debuggers, coverage) run as usual.
  if (throwflag || !activeOptions() || frame->owner != FRAME_OWNED_BY_THREAD ||
      tstate->cframe->use_tracing)
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
  FrameView view{frame->f_code,     reinterpret_cast<PyObject *>(frame->f_func),
                 frame->f_globals,  frame->f_builtins,
                 frame->localsplus, frame->f_code->co_nlocalsplus};
  DefaultCtx ctx{tstate, frame, throwflag};
  return handleFrame(view, EvalDefault{evalDefault, &ctx});
}

} // namespace

namespace platform {

bool supported(std::string *) { return true; }

// Whatever was installed before (normally the default evaluator) is put back on uninstall.
_PyFrameEvalFunction gPrevious = nullptr;

void install() {
  PyInterpreterState *interp = PyInterpreterState_Get();
  gPrevious = _PyInterpreterState_GetEvalFrameFunc(interp);
  _PyInterpreterState_SetEvalFrameFunc(interp, evalFrame);
}

void uninstall() {
  _PyInterpreterState_SetEvalFrameFunc(PyInterpreterState_Get(),
                                       gPrevious ? gPrevious : _PyEval_EvalFrameDefault);
}

} // namespace platform

} // namespace xjit::frontend

#endif
