# Run by ctest (through a test include file, motley_test's TORCH): registers one test per
# GoogleTest suite of EXECUTABLE, "Suite.*", which runs the suite's tests in one process. A
# program that links libtorch spends about 0.6 s starting (libtorch registers its operators),
# which a test per case would pay once per case; most of the executor's cases take less.
# A suite passes when none of its cases fails; the cases that skip themselves are listed in
# its output (a pattern for "all skipped" would also match a suite whose cases all failed).
# The listing is cached in CTEST_FILE and taken again only when the program or this file is
# newer.
function(motley_suite_tests executable working_dir ctest_file)
  get_filename_component(program "${executable}" NAME)
  if(NOT EXISTS "${executable}")
    add_test("${program}_NOT_BUILT" "${program}_NOT_BUILT")
    return()
  endif()
  if(NOT EXISTS "${ctest_file}" OR NOT "${ctest_file}" IS_NEWER_THAN "${executable}" OR
     NOT "${ctest_file}" IS_NEWER_THAN "${CMAKE_CURRENT_FUNCTION_LIST_FILE}")
    execute_process(COMMAND "${executable}" --gtest_list_tests
      WORKING_DIRECTORY "${working_dir}" TIMEOUT 60
      OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${executable} --gtest_list_tests failed (${rc}): ${errors}")
    endif()
    # A suite's line starts in the first column and ends its name with '.'; a value printed
    # after '#' may hold anything, so separators are taken out before the lines are split.
    string(REPLACE ";" "" listing "${listing}")
    string(REPLACE "[" "" listing "${listing}")
    string(REPLACE "]" "" listing "${listing}")
    string(REPLACE "\n" ";" lines "${listing}")
    set(script "")
    foreach(line IN LISTS lines)
      if(line MATCHES "^([A-Za-z_][A-Za-z0-9_/]*)\\.")
        set(suite "${CMAKE_MATCH_1}")
        string(APPEND script
          "add_test([==[${suite}.*]==] [==[${executable}]==] [==[--gtest_filter=${suite}.*]==])\n"
          "set_tests_properties([==[${suite}.*]==] PROPERTIES WORKING_DIRECTORY "
          "[==[${working_dir}]==])\n")
      endif()
    endforeach()
    if(script STREQUAL "")
      message(FATAL_ERROR "${executable} lists no test suites")
    endif()
    file(WRITE "${ctest_file}" "${script}")
  endif()
  include("${ctest_file}")
endfunction()
