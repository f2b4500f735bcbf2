// A small HTTP/1.1 server for a daemon's operational endpoints — `GET /metrics`, the status page —
// over plain HTTP or HTTPS (a PEM certificate and key, as the daemon's gRPC port uses). Built on
// cpp-httplib (Debian's libcpp-httplib-dev); nothing else includes <httplib.h>.
//
// Example:
//   HttpServerOptions options;
//   options.listen = "127.0.0.1:0";  // port 0: a free port
//   absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(options, {
//       {"/metrics", [&](const HttpRequest&) { return HttpResponse{200, kExpositionContentType, text}; }}});
//   ... (*server)->port() ...
//   (*server)->Stop();
//
// Routing: exact paths, GET (and HEAD, which httplib answers from the GET handler without a body);
// an unknown path is 404 and another method 405. Requests are never logged (a request may carry a
// bearer token in a header), bodies are refused above 64 KiB, and every response says
// `Cache-Control: no-store` and `X-Content-Type-Options: nosniff`.
//
// Thread safety: handlers run on the server's pool of `threads` threads, concurrently; Stop() may be
// called from any thread and is idempotent (the destructor calls it).
#ifndef SLIMFIT_BASE_HTTP_SERVER_H_
#define SLIMFIT_BASE_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "base/thread.h"

namespace slimfit::base {

struct HttpRequest {
  std::string method;          // "GET" or "HEAD"
  std::string path;            // without the query string
  std::string remote_address;  // the peer's IP address
  // Header names in lower case.
  std::map<std::string, std::string> headers;

  // The value of header `name` (any case), or "".
  std::string Header(absl::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // More headers (e.g. Content-Security-Policy, WWW-Authenticate).
  std::vector<std::pair<std::string, std::string>> headers;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpServerOptions {
  // host:port, the host an IP address or name ("[::1]" for IPv6); port 0 picks a free one.
  std::string listen;
  // PEM certificate chain (leaf first) and its private key: HTTPS. Both empty: plain HTTP.
  std::string tls_cert_pem;
  std::string tls_key_pem;
  int threads = 4;  // concurrent requests
};

class HttpServer {
 public:
  // Binds and starts serving `routes` (path → handler). INVALID_ARGUMENT for a malformed address or
  // TLS material (a certificate without its key, PEM that does not parse, a key that does not
  // match); UNAVAILABLE when the address cannot be bound (in use, not local).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           std::map<std::string, HttpHandler> routes);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Stops accepting, lets handlers in progress finish and joins the serving thread. Idempotent.
  void Stop();

  int port() const { return port_; }
  // "host:port" as bound (the listen host with the chosen port).
  const std::string& address() const { return address_; }
  bool tls() const { return tls_; }

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::string address_;
  bool tls_ = false;
  absl::Mutex stop_mutex_;
  Thread thread_ ABSL_GUARDED_BY(stop_mutex_);  // serving; joined by Stop
};

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_HTTP_SERVER_H_
