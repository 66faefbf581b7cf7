// Small helpers for the CPython API in the frontend: a C++ exception that means "a Python
// exception is set", and checked calls that throw it.
#pragma once

#include "xjit/frontend/capture.h"

#include <exception>
#include <string>

namespace xjit::frontend {

/// Thrown when a CPython call failed and left a Python exception set; whoever catches it
/// either propagates the exception to Python (return NULL) or clears it.
struct PyErrorSet : std::exception {
  const char *what() const noexcept override { return "a Python exception is set"; }
};

/// A pending KeyboardInterrupt / SystemExit (a BaseException that is not an Exception): never
/// turned into an internal error or swallowed, it propagates to the program.
inline bool interruptPending() {
  return PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_Exception);
}

/// Steals a new reference; throws PyErrorSet when it is NULL.
inline PyRef checked(PyObject *o) {
  if (!o) throw PyErrorSet();
  return PyRef::steal(o);
}

/// The pending Python exception as "TypeError: message" (cleared), for diagnostics.
std::string takePyErrorMessage();
/// The pending Python exception's type name, "TypeError" (cleared); "error" when none is set.
std::string takePyErrorType();

/// The contents of a str object; "" for anything else (or a str that cannot be encoded: the
/// error is cleared).
std::string utf8(PyObject *s);

/// `o.__module__` as a string; "" when it has none (the error is cleared).
std::string moduleNameOf(PyObject *o);

/// An interned str that lives for the whole process (attribute names looked up in hot paths).
PyObject *internedStr(const char *s);

/// The keys of dict `d` as a new list, in iteration order: an OrderedDict's own order (what
/// move_to_end changes, e.g. a hook registered with prepend=True), which its dict storage,
/// PyDict_Keys, does not follow. Null with an error set on failure.
PyObject *dictKeysInOrder(PyObject *d);

} // namespace xjit::frontend
