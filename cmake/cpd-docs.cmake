# SPDX-License-Identifier: MIT
#
# The C++ code blocks of cpd's Markdown pages, turned into sources at configure
# time; tests/docs/CMakeLists.txt builds and runs them (tests/docs/README.md has
# the convention for authors). In short:
#
#   A ```cpp (or c++, cxx, cuda, cu) block that defines `int main(` is a program:
#   compiled alone, linked and run. Any other block is a fragment: the body of a
#   function, run once; its `#` lines (#include, #define) move to file scope. What a fragment
#   uses but does not show (variables, sizes, a format alias F) comes from an HTML
#   comment right before the block (only blank lines between), invisible on the page:
#
#     <!-- doc-test: OPTIONS
#     #include <vector>
#     std::vector<float> in(64), out(64);
#     -->
#
#   OPTIONS: `compile-only` (compiled, not run: it needs what a test does not have),
#   `file=<path>` (the block must equal that source file, after its leading //
#   comment lines and one blank line; the file is built and run elsewhere). A
#   fragment that includes no cpd header (itself or in its comment) gets
#   `#include <cpd/cpd.hpp>`, so a new block is compiled and run with nothing to
#   register.
#
#   The blocks of one page share one translation unit per dependency group, chosen
#   from the includes: `<cpd/nccl.cuh>` nccl, another `.cuh` cuda (nvcc, compiled
#   only: no GPU), `<cpd/mpi.hpp>` mpi (run under mpiexec -n 2), `<cpd/thrust.hpp>`
#   or `<thrust/...>` thrust (CPP device system, run), anything else host (run).
#   `#line` directives point every diagnostic at the page and line of the block.

include_guard(GLOBAL)

# cpd_doc_escape(<var>): `;`, `[`, `]` and `\` replaced by control characters, so
# that the text can be split into a CMake list of lines; cpd_doc_unescape undoes it.
string(ASCII 1 cpd_doc_sc)
string(ASCII 2 cpd_doc_lb)
string(ASCII 3 cpd_doc_rb)
string(ASCII 4 cpd_doc_bs)
macro(cpd_doc_escape var)
  string(REPLACE "\\" "${cpd_doc_bs}" ${var} "${${var}}")
  string(REPLACE ";" "${cpd_doc_sc}" ${var} "${${var}}")
  string(REPLACE "[" "${cpd_doc_lb}" ${var} "${${var}}")
  string(REPLACE "]" "${cpd_doc_rb}" ${var} "${${var}}")
endmacro()
macro(cpd_doc_unescape var)
  string(REPLACE "${cpd_doc_sc}" ";" ${var} "${${var}}")
  string(REPLACE "${cpd_doc_lb}" "[" ${var} "${${var}}")
  string(REPLACE "${cpd_doc_rb}" "]" ${var} "${${var}}")
  string(REPLACE "${cpd_doc_bs}" "\\" ${var} "${${var}}")
endmacro()

# cpd_doc_next_line(<out> <text>): the number of the line after a #line directive
# appended to text (which ends with a newline).
function(cpd_doc_next_line out text)
  string(REGEX MATCHALL "\n" newlines "${text}")
  list(LENGTH newlines count)
  math(EXPR count "${count} + 2")
  set(${out} ${count} PARENT_SCOPE)
endfunction()

# cpd_doc_read_lines(<markdown> <out list>): the file's lines, escaped.
function(cpd_doc_read_lines md out)
  file(READ "${md}" text)
  cpd_doc_escape(text)
  string(REPLACE "\n" ";" lines "${text}")
  set(${out} "${lines}" PARENT_SCOPE)
endfunction()

# cpd_doc_generate(PAGE <markdown> NAME <page name, e.g. docs/bulk.md> OUT <dir>)
# Writes the sources of the page's C++ blocks into OUT and sets, in the caller:
#   cpd_doc_groups          groups with fragments: host thrust mpi cuda nccl
#   cpd_doc_<g>_source      the group's translation unit
#   cpd_doc_<g>_lines       its blocks' fence lines;  cpd_doc_<g>_run: TRUE if one runs
#   cpd_doc_programs        fence lines of programs; cpd_doc_program_<l>_source,
#                           cpd_doc_program_<l>_group, cpd_doc_program_<l>_run
#   cpd_doc_files           fence lines of `file=` blocks; cpd_doc_file_<l>: the path
#   cpd_doc_errors          what is wrong with the page's blocks or comments
function(cpd_doc_generate)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "PAGE;NAME;OUT" "")
  cpd_doc_read_lines("${arg_PAGE}" lines)
  string(MAKE_C_IDENTIFIER "${arg_NAME}" stem)
  set(errors "")
  set(groups "")
  set(programs "")
  set(files "")

  set(n 0)
  set(state text)          # text | comment | block
  set(comment_end -1)      # line of the last doc-test comment's -->
  set(last_nonblank 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    cpd_doc_unescape(line)
    if(state STREQUAL "comment")
      if(line MATCHES "^[ \t]*-->[ \t]*$")
        set(state text)
        set(comment_end ${n})
        set(last_nonblank ${n})
      elseif(line MATCHES "-->")
        list(APPEND errors "${arg_NAME}:${n}: put the --> that closes a doc-test comment on a line of its own")
        set(state text)
      elseif(line MATCHES "^[ \t]*#")
        string(APPEND c_includes "#line ${n} \"${arg_PAGE}\"\n${line}\n")
        string(APPEND c_body "\n")
      else()
        string(APPEND c_body "${line}\n")
      endif()
      continue()
    endif()

    if(state STREQUAL "other")  # a block that is not C++
      if(line MATCHES "^[ ]*```[ \t]*$")
        set(state text)
        set(last_nonblank ${n})
      endif()
      continue()
    endif()

    if(state STREQUAL "block")
      if(NOT line MATCHES "^[ ]*```[ \t]*$")
        string(APPEND b_text "${line}\n")
        if(line MATCHES "^[ \t]*#")
          string(APPEND b_includes "#line ${n} \"${arg_PAGE}\"\n${line}\n")
          string(APPEND b_body "\n")
        else()
          string(APPEND b_body "${line}\n")
        endif()
        continue()
      endif()
      # --- the block ends: classify it and add it to its group -----------------
      set(state text)
      set(last_nonblank ${n})
      set(where "${arg_NAME}:${b_line}")
      set(options "")
      set(context_body "")
      set(context_includes "")
      if(b_comment)
        set(options "${c_options}")
        set(context_body "${c_body}")
        set(context_includes "${c_includes}")
      endif()
      set(run TRUE)
      set(file "")
      foreach(option IN LISTS options)
        if(option STREQUAL "compile-only")
          set(run FALSE)
        elseif(option MATCHES "^file=(.+)$")
          set(file "${CMAKE_MATCH_1}")
        else()
          list(APPEND errors "${where}: unknown doc-test option '${option}' (compile-only, file=<path>)")
        endif()
      endforeach()
      if(file)
        if(NOT context_body MATCHES "^[ \t\n]*$" OR context_includes)
          list(APPEND errors "${where}: a file= block takes no context")
        endif()
        list(APPEND files ${b_line})
        set(cpd_doc_file_${b_line} "${file}" PARENT_SCOPE)
        continue()
      endif()
      set(all_includes "${context_includes}${b_includes}")
      if(all_includes MATCHES "cpd/nccl\\.cuh|<nccl\\.h>")
        set(group nccl)
      elseif(all_includes MATCHES "\\.cuh>|<cuda_runtime|<cuda\\.h>" OR b_lang MATCHES "^cu")
        set(group cuda)
      elseif(all_includes MATCHES "cpd/mpi(_codec)?\\.hpp|<mpi\\.h>")
        set(group mpi)
      elseif(all_includes MATCHES "cpd/thrust\\.hpp|<thrust/")
        set(group thrust)
      else()
        set(group host)
      endif()
      if(group MATCHES "^(cuda|nccl)$")
        set(run FALSE)  # compiled by nvcc; the docs tests use no GPU
      endif()
      if(b_text MATCHES "(^|\n)[ \t]*int[ \t]+main[ \t]*\\(")
        # A whole program: its own translation unit, as it is.
        if(NOT context_body MATCHES "^[ \t\n]*$" OR context_includes)
          list(APPEND errors "${where}: a program (it defines main) takes no context")
        endif()
        set(ext cpp)
        if(group MATCHES "^(cuda|nccl)$")
          set(ext cu)
        endif()
        set(source "${arg_OUT}/${stem}_L${b_line}.${ext}")
        file(CONFIGURE OUTPUT "${source}" @ONLY CONTENT
"// Generated from ${arg_NAME} by cmake/cpd-docs.cmake: do not edit.
#line ${b_first} \"${arg_PAGE}\"
@b_text@")
        list(APPEND programs ${b_line})
        set(cpd_doc_program_${b_line}_source "${source}" PARENT_SCOPE)
        set(cpd_doc_program_${b_line}_group "${group}" PARENT_SCOPE)
        set(cpd_doc_program_${b_line}_run "${run}" PARENT_SCOPE)
        continue()
      endif()
      # A fragment: a function of its group's translation unit.
      if(NOT group IN_LIST groups)
        list(APPEND groups ${group})
        set(g_${group}_includes "")
        set(g_${group}_functions "")
        set(g_${group}_calls "")
        set(g_${group}_lines "")
        set(g_${group}_run FALSE)
        set(g_${group}_default FALSE)
      endif()
      string(APPEND g_${group}_includes "${all_includes}")
      if(NOT all_includes MATCHES "<cpd/" AND NOT g_${group}_default)
        string(APPEND g_${group}_includes "// default context: <cpd/cpd.hpp>\n#include <cpd/cpd.hpp>\n")
        set(g_${group}_default TRUE)
      endif()
      set(fn "cpd_doc_L${b_line}")
      string(APPEND g_${group}_functions
             "namespace ${fn} {\n[[maybe_unused]] void run() {\n")
      if(b_comment)
        string(APPEND g_${group}_functions "#line ${c_first} \"${arg_PAGE}\"\n${context_body}")
      endif()
      string(APPEND g_${group}_functions "#line ${b_first} \"${arg_PAGE}\"\n${b_body}}\n}  // namespace ${fn}\n")
      if(run)
        string(APPEND g_${group}_calls "  failures += cpd_doc_run(\"${where}\", &${fn}::run);\n")
        set(g_${group}_run TRUE)
      else()
        string(APPEND g_${group}_calls "  std::printf(\"${where}: compiled, not run (compile-only)\\n\");\n")
      endif()
      list(APPEND g_${group}_lines ${b_line})
      continue()
    endif()

    # --- state text ---------------------------------------------------------------
    if(line MATCHES "^[ ]*<!--[ \t]*doc-test(.*)$")
      set(header "${CMAKE_MATCH_1}")
      set(c_first ${n})
      set(c_body "")
      set(c_includes "")
      if(header MATCHES "^(.*)-->[ \t]*$")
        set(header "${CMAKE_MATCH_1}")
        set(comment_end ${n})
        set(last_nonblank ${n})
      else()
        set(state comment)
        math(EXPR c_first "${n} + 1")
      endif()
      string(STRIP "${header}" header)
      if(header MATCHES "^:(.*)$")
        string(STRIP "${CMAKE_MATCH_1}" header)
      endif()
      separate_arguments(c_options UNIX_COMMAND "${header}")
      set(c_line ${n})
      continue()
    endif()
    if(line MATCHES "^[ ]*```[ \t]*([A-Za-z0-9+_-]*)")
      set(lang "${CMAKE_MATCH_1}")
      string(TOLOWER "${lang}" lang)
      if(lang MATCHES "^(cpp|c\\+\\+|cxx|cuda|cu)$")
        set(state block)
        set(b_lang "${lang}")
        set(b_line ${n})
        math(EXPR b_first "${n} + 1")
        set(b_text "")
        set(b_body "")
        set(b_includes "")
        set(b_comment FALSE)
        if(comment_end EQUAL last_nonblank AND comment_end GREATER 0)
          set(b_comment TRUE)
        endif()
      else()
        if(comment_end EQUAL last_nonblank AND comment_end GREATER 0)
          list(APPEND errors "${arg_NAME}:${c_line}: a doc-test comment before a ```${lang} block (it serves C++ blocks only)")
        endif()
        # Skip to the end of this non-C++ block.
        set(state other)
      endif()
      set(comment_end -1)
      continue()
    endif()
    if(NOT line MATCHES "^[ \t]*$")
      if(comment_end EQUAL last_nonblank AND comment_end GREATER 0)
        list(APPEND errors "${arg_NAME}:${c_line}: a doc-test comment that no ```cpp block follows")
        set(comment_end -1)
      endif()
      set(last_nonblank ${n})
    endif()
  endforeach()
  if(state STREQUAL "block")
    list(APPEND errors "${arg_NAME}:${b_line}: the ``` block is not closed")
  elseif(state STREQUAL "comment")
    list(APPEND errors "${arg_NAME}:${c_line}: the doc-test comment is not closed (a line -->)")
  endif()

  # --- one translation unit per group ---------------------------------------------
  foreach(group IN LISTS groups)
    set(ext cpp)
    if(group MATCHES "^(cuda|nccl)$")
      set(ext cu)
    endif()
    set(source "${arg_OUT}/${stem}_${group}.${ext}")
    set(init "")
    set(fini "")
    if(group STREQUAL "mpi")
      set(init "  MPI_Init(&argc, &argv);\n")
      set(fini "  MPI_Finalize();\n")
    endif()
    # #line directives name files that exist (the page, this source), with the right
    # lines: nvcc lists them in its dependency file.
    set(content "// Generated from ${arg_NAME} by cmake/cpd-docs.cmake: do not edit.
// The ${group} fragments of the page, one function each, run in order by main().
${g_${group}_includes}")
    cpd_doc_next_line(next "${content}")
    string(APPEND content "#line ${next} \"${source}\"
#include <cstdio>
#include <exception>

namespace {
int cpd_doc_run(const char* where, void (*block)()) {
  try {
    block();
    std::printf(\"%s: ran\\n\", where);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, \"%s: the block threw: %s\\n\", where, e.what());
  } catch (...) {
    std::fprintf(stderr, \"%s: the block threw\\n\", where);
  }
  return 1;
}
}  // namespace

${g_${group}_functions}")
    cpd_doc_next_line(next "${content}")
    string(APPEND content "#line ${next} \"${source}\"
int main([[maybe_unused]] int argc, [[maybe_unused]] char** argv) {
  int failures = 0;
${init}${g_${group}_calls}${fini}  return failures == 0 ? 0 : 1;
}
")
    file(CONFIGURE OUTPUT "${source}" @ONLY CONTENT "@content@")
    set(cpd_doc_${group}_source "${source}" PARENT_SCOPE)
    set(cpd_doc_${group}_lines "${g_${group}_lines}" PARENT_SCOPE)
    set(cpd_doc_${group}_run "${g_${group}_run}" PARENT_SCOPE)
  endforeach()

  set(cpd_doc_groups "${groups}" PARENT_SCOPE)
  set(cpd_doc_programs "${programs}" PARENT_SCOPE)
  set(cpd_doc_files "${files}" PARENT_SCOPE)
  set(cpd_doc_errors "${errors}" PARENT_SCOPE)
endfunction()

# cpd_doc_write_targets(<file>): writes name|type|file|manual dependencies of every
# target of the project (file: $<TARGET_FILE> of executables), for the shell checks
# of the docs. Call it once every directory is configured (cmake_language(DEFER)).
function(cpd_doc_write_targets out)
  set(dirs "${PROJECT_SOURCE_DIR}")
  set(content "")
  while(dirs)
    list(POP_FRONT dirs dir)
    get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
    list(APPEND dirs ${subdirs})
    get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
    foreach(t IN LISTS targets)
      get_target_property(type ${t} TYPE)
      set(file "")
      if(type STREQUAL "EXECUTABLE")
        set(file "$<TARGET_FILE:${t}>")
      endif()
      get_target_property(deps ${t} MANUALLY_ADDED_DEPENDENCIES)
      if(NOT deps)
        set(deps "")
      endif()
      string(REPLACE ";" "," deps "${deps}")
      string(APPEND content "${t}|${type}|${file}|${deps}\n")
    endforeach()
  endwhile()
  file(GENERATE OUTPUT "${out}" CONTENT "${content}")
endfunction()
