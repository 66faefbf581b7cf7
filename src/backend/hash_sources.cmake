# Writes OUT, a C++ file defining xjit_backend_source_hash(): the SHA-256 of the backend's
# sources (FILES, a |-separated list, hashed in sorted order with their names). Run at build
# time whenever one of them changes, so the persistent compile cache never serves code that an
# older code generator produced. Rewrites OUT only when the hash changes.
string(REPLACE "|" ";" FILES "${FILES}")
list(SORT FILES)
set(all "")
foreach(f IN LISTS FILES)
  file(SHA256 "${f}" h)
  get_filename_component(name "${f}" NAME)
  string(APPEND all "${name}:${h}\n")
endforeach()
string(SHA256 hash "${all}")
set(text "extern \"C\" const char *xjit_backend_source_hash() { return \"${hash}\"; }\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
  if(old STREQUAL text)
    return()
  endif()
endif()
file(WRITE "${OUT}" "${text}")
