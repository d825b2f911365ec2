// The web page's static files (services/router/web/), compiled into the binary at build time
// (cmake/EmbedFiles.cmake), so a server needs no file next to it and no CDN. Immutable.
#pragma once

#include <string_view>
#include <vector>

namespace colibri::router {

struct EmbeddedFile {
  std::string_view name;  // file name: "index.html", "app.js", "style.css"
  std::string_view bytes;
};

const std::vector<EmbeddedFile>& EmbeddedFiles();

}  // namespace colibri::router
