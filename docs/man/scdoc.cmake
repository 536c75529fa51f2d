# Renders one scdoc source into a man page (scdoc reads stdin and writes
# stdout, which add_custom_command cannot redirect portably).
#   cmake -DSCDOC=... -DIN=page.scd -DOUT=page -P scdoc.cmake
execute_process(COMMAND ${SCDOC} INPUT_FILE ${IN} OUTPUT_FILE ${OUT}.tmp RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(REMOVE ${OUT}.tmp)
  message(FATAL_ERROR "scdoc failed on ${IN} (${rc})")
endif()
# scdoc asks for no hyphenation and left adjustment before .TH, but the man
# macros' .TH turns hyphenation back on, which splits function names such
# as homa_engine_send_reply across lines: repeat both requests after it.
file(READ ${OUT}.tmp page)
string(REGEX REPLACE "(\n\\.TH [^\n]*\n)" "\\1.nh\n.ad l\n" page "${page}")
file(WRITE ${OUT} "${page}")
file(REMOVE ${OUT}.tmp)
