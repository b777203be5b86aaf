// The chat page the HTTP API serves at GET / and /index.html (docs/http-api.md): one
// self-contained HTML file, chat_page/index.html, embedded at build time.
//
// CMake reads the file into chat_page.cc (generated from chat_page.cc.in in the build
// folder) and re-runs when it changes, so the binary always serves the page in the tree.
#ifndef FOLIO_SERVICES_FRONTEND_HTTP_CHAT_PAGE_H_
#define FOLIO_SERVICES_FRONTEND_HTTP_CHAT_PAGE_H_

#include <string_view>

namespace folio::frontend {

// The page's HTML (UTF-8), valid for the life of the process.
std::string_view ChatPageHtml();

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_HTTP_CHAT_PAGE_H_
