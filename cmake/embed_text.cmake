# Writes OUTPUT, a C++ header holding the text of INPUT as `inline constexpr std::string_view
# NAME` (a raw string literal), so that the binary serves the file with nothing read at run time.
#   cmake -DINPUT=file -DOUTPUT=header.h -DNAME=kName -P cmake/embed_text.cmake
file(READ "${INPUT}" text)
string(FIND "${text}" ")voxd_embedded\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} holds the raw string's end marker )voxd_embedded\"")
endif()
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUT} by cmake/embed_text.cmake; do not edit.\n#pragma once\n\n"
  "#include <string_view>\n\ninline constexpr std::string_view ${NAME} = R\"voxd_embedded(${text})voxd_embedded\";\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
