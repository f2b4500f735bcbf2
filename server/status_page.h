// The coordinator's read-only status page, served on its metrics port (rpc/http_endpoint.h):
//
//   GET /        the page: HTML with its own inline style and script, and no data. The script asks
//                for the client token — from the URL fragment (`/#token=…`, which browsers never send
//                to the server; the script removes it from the address bar) or a form — keeps it in
//                the tab's sessionStorage, and every few seconds fetches /status with it.
//   GET /status  the page's content (status_views/status_render.h) for a request that carries a client
//                token as `Authorization: Bearer <token>`; 401 with no data otherwise.
//
// The token never travels in a URL or query string (so no access log, proxy log or Referer can hold
// it) and is never logged. The page's Content-Security-Policy allows only its own script and style
// (by hash), connections to its own origin, and images from data: URLs; no external resource is
// ever fetched.
//
// Thread safety: thread-safe; handlers run on the HTTP server's threads. The coordinator and tokens
// must outlive the page.
#ifndef SLIMFIT_SERVER_STATUS_PAGE_H_
#define SLIMFIT_SERVER_STATUS_PAGE_H_

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/http_server.h"
#include "server/access_tokens.h"
#include "server/coordinator.h"
#include "status_views/status_render.h"

namespace slimfit::server {

class StatusPage {
 public:
  struct Options {
    Coordinator* coordinator = nullptr;           // required; not owned
    const AccessTokens* client_tokens = nullptr;  // required; not owned
    int refresh_seconds = 5;                      // how often the page reloads its content
    int max_jobs = 20;                            // jobs listed, newest first
    int max_details = 4;                          // jobs shown with curves and plans
  };

  explicit StatusPage(Options options);
  StatusPage(const StatusPage&) = delete;
  StatusPage& operator=(const StatusPage&) = delete;

  // "/" and "/status".
  std::map<std::string, base::HttpHandler> Routes();

  base::HttpResponse Page(const base::HttpRequest& request) const;
  base::HttpResponse Status(const base::HttpRequest& request);

  // Whether `authorization` ("Bearer <token>", the scheme in any case) names an accepted token.
  bool Authorized(const std::string& authorization) const;

  // What /status shows now.
  status_views::StatusSnapshot Snapshot();

 private:
  // The plan search chart of a worker for a job, cached per worker incarnation and budget.
  status_views::WorkerPlanChart PlanChart(const v1::Job& job, const v1::WorkerInfo& worker);

  const Options options_;
  const std::string page_;  // the HTML of "/"
  const std::string content_security_policy_;

  absl::Mutex mutex_;
  using ChartKey =
      std::tuple<std::string, std::string, uint64_t, int64_t>;  // job, worker, incarnation, budget
  std::map<ChartKey, status_views::WorkerPlanChart> charts_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_STATUS_PAGE_H_
