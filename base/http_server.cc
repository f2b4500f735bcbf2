#include "base/http_server.h"

#include <httplib.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"

namespace slimfit::base {
namespace {

constexpr size_t kMaxRequestBody = 64 * 1024;

struct HostPort {
  std::string host;  // without brackets, as httplib binds it
  int port = 0;
};

absl::StatusOr<HostPort> ParseListen(absl::string_view listen) {
  const size_t colon = listen.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", listen, "': expected host:port"));
  }
  HostPort parsed;
  absl::string_view host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  parsed.host = std::string(host);
  if (parsed.host.empty() || !absl::SimpleAtoi(listen.substr(colon + 1), &parsed.port) || parsed.port < 0 ||
      parsed.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", listen, "': expected host:port with a port of 0 to 65535"));
  }
  return parsed;
}

// The oldest error on OpenSSL's queue as text (the queue is cleared).
std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "no detail";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

// Installs the PEM chain and key in `context`: INVALID_ARGUMENT saying which part is wrong.
absl::Status ConfigureTls(SSL_CTX& context, const std::string& cert_pem, const std::string& key_pem) {
  SSL_CTX_set_min_proto_version(&context, TLS1_2_VERSION);
  BIO* certs = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* leaf = PEM_read_bio_X509(certs, nullptr, nullptr, nullptr);
  if (leaf == nullptr) {
    BIO_free(certs);
    return absl::InvalidArgumentError(absl::StrCat("the TLS certificate is not PEM: ", OpenSslError()));
  }
  const bool leaf_ok = SSL_CTX_use_certificate(&context, leaf) == 1;
  X509_free(leaf);
  if (!leaf_ok) {
    BIO_free(certs);
    return absl::InvalidArgumentError(absl::StrCat("the TLS certificate was refused: ", OpenSslError()));
  }
  // The rest of the chain, if any.
  while (X509* intermediate = PEM_read_bio_X509(certs, nullptr, nullptr, nullptr)) {
    if (SSL_CTX_add0_chain_cert(&context, intermediate) != 1) {
      X509_free(intermediate);
      BIO_free(certs);
      return absl::InvalidArgumentError(
          absl::StrCat("the TLS certificate chain was refused: ", OpenSslError()));
    }
  }
  ERR_clear_error();  // the loop ends on "no start line"
  BIO_free(certs);

  BIO* key_bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
  BIO_free(key_bio);
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("the TLS key is not a PEM private key: ", OpenSslError()));
  }
  const bool key_ok = SSL_CTX_use_PrivateKey(&context, key) == 1;
  EVP_PKEY_free(key);
  if (!key_ok || SSL_CTX_check_private_key(&context) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the TLS key does not match the certificate: ", OpenSslError()));
  }
  return absl::OkStatus();
}

HttpRequest ToRequest(const httplib::Request& request) {
  HttpRequest converted;
  converted.method = request.method;
  converted.path = request.path;
  converted.remote_address = request.remote_addr;
  for (const auto& [name, value] : request.headers) {
    converted.headers.emplace(absl::AsciiStrToLower(name), value);
  }
  return converted;
}

void Send(const HttpResponse& response, httplib::Response* out) {
  out->status = response.status;
  out->set_header("Cache-Control", "no-store");
  out->set_header("X-Content-Type-Options", "nosniff");
  for (const auto& [name, value] : response.headers) out->set_header(name.c_str(), value);
  out->set_content(response.body, response.content_type.c_str());
}

HttpResponse TextResponse(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.body = std::move(body);
  return response;
}

}  // namespace

std::string HttpRequest::Header(absl::string_view name) const {
  auto it = headers.find(absl::AsciiStrToLower(name));
  return it == headers.end() ? "" : it->second;
}

struct HttpServer::Impl {
  std::unique_ptr<httplib::Server> server;
  std::map<std::string, HttpHandler> routes;
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              std::map<std::string, HttpHandler> routes) {
  absl::StatusOr<HostPort> listen = ParseListen(options.listen);
  if (!listen.ok()) return listen.status();
  if (options.tls_cert_pem.empty() != options.tls_key_pem.empty()) {
    return absl::InvalidArgumentError("HTTPS needs both a certificate and its key");
  }
  auto impl = std::make_unique<Impl>();
  impl->routes = std::move(routes);
  const bool tls = !options.tls_cert_pem.empty();
  if (tls) {
    absl::Status configured;
    impl->server = std::make_unique<httplib::SSLServer>([&](SSL_CTX& context) {
      configured = ConfigureTls(context, options.tls_cert_pem, options.tls_key_pem);
      return configured.ok();
    });
    if (!configured.ok()) return configured;
  } else {
    impl->server = std::make_unique<httplib::Server>();
  }
  if (!impl->server->is_valid()) return absl::InternalError("the HTTP server could not be set up");

  httplib::Server& server = *impl->server;
  const int threads = options.threads < 1 ? 1 : options.threads;
  server.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  server.set_payload_max_length(kMaxRequestBody);
  server.set_read_timeout(std::chrono::seconds(5));
  server.set_write_timeout(std::chrono::seconds(10));
  server.set_keep_alive_timeout(2);
  server.set_keep_alive_max_count(20);
  // Headers and body go out as separate writes; without this, Nagle's algorithm holds a small body
  // back until the client's (delayed) acknowledgement of the headers.
  server.set_tcp_nodelay(true);
  // httplib's default sets SO_REUSEPORT, which lets a second process bind the same port and take
  // half the requests; SO_REUSEADDR alone still allows a quick restart.
  server.set_socket_options([](socket_t socket) {
    int yes = 1;
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  const std::map<std::string, HttpHandler>* table = &impl->routes;
  server.Get(".*", [table](const httplib::Request& request, httplib::Response& response) {
    auto route = table->find(request.path);
    if (route == table->end()) {
      Send(TextResponse(404, absl::StrCat("no page at ", request.path, "\n")), &response);
      return;
    }
    Send(route->second(ToRequest(request)), &response);
  });
  auto not_allowed = [](const httplib::Request& request, httplib::Response& response) {
    HttpResponse refused =
        TextResponse(405, absl::StrCat(request.method, " is not allowed: read-only endpoints\n"));
    refused.headers.emplace_back("Allow", "GET, HEAD");
    Send(refused, &response);
  };
  server.Post(".*", not_allowed);
  server.Put(".*", not_allowed);
  server.Patch(".*", not_allowed);
  server.Delete(".*", not_allowed);
  server.Options(".*", not_allowed);

  int port = listen->port;
  if (port == 0) {
    port = server.bind_to_any_port(listen->host);
    if (port <= 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", options.listen, " (not a local address?)"));
    }
  } else if (!server.bind_to_port(listen->host, port)) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen, " (address in use?)"));
  }

  std::unique_ptr<HttpServer> started(new HttpServer(std::move(impl)));
  started->port_ = port;
  started->tls_ = tls;
  started->address_ = absl::StrCat(options.listen.substr(0, options.listen.rfind(':')), ":", port);
  httplib::Server* serving = started->impl_->server.get();
  absl::MutexLock lock(&started->stop_mutex_);
  started->thread_ = Thread("http", [serving] {
    serving->listen_after_bind();
    return absl::OkStatus();
  });
  // httplib's stop() does nothing before the accept loop runs: wait for it, so Stop() always stops.
  while (!serving->is_running() && !started->thread_.done()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (started->thread_.done()) {
    if (absl::Status joined = started->thread_.Join(); !joined.ok()) return joined;
    return absl::UnavailableError(absl::StrCat("cannot serve on ", options.listen));
  }
  return started;
}

void HttpServer::Stop() {
  absl::MutexLock lock(&stop_mutex_);
  if (!thread_.joinable()) return;
  impl_->server->stop();
  if (absl::Status joined = thread_.Join(); !joined.ok()) LogError("HTTP server: ", joined.message());
}

HttpServer::~HttpServer() { Stop(); }

}  // namespace slimfit::base
