// Text put into the report module's XML and HTML output (the SVG timeline, the HTML page):
// the five characters markup gives a meaning to, escaped. Internal to the report module.
#pragma once

#include <string>

namespace motley::internal {

// & < > " ' as entities; everything else as it is.
std::string escape_markup(const std::string& s);

}  // namespace motley::internal
