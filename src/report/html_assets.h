// The HTML report's style sheet and script (html_report.css, html_report.js in this folder),
// compiled in from those files by CMake (html_assets.cc.in) so that the page needs nothing else.
#pragma once

namespace motley::internal {

extern const char* const kHtmlReportStyle;
extern const char* const kHtmlReportScript;

}  // namespace motley::internal
