#include "server/status_page.h"

#include <set>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/sha256.h"
#include "planner/plan_chart.h"
#include "planner/plan_search.h"
#include "server/job_record.h"

namespace slimfit::server {
namespace {

constexpr char kStyle[] = R"css(
body { font-family: sans-serif; margin: 1.5em; color: #222; background: #fafafa; }
header { display: flex; align-items: baseline; gap: 1.5em; flex-wrap: wrap; }
h1 { font-size: 1.4em; margin: 0; }
h2 { font-size: 1.15em; margin: 1.2em 0 0.4em; }
h3 { font-size: 1em; margin: 0.8em 0 0.3em; }
#state { color: #666; margin: 0; }
table { border-collapse: collapse; background: white; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #eee; }
tr.worker-plan td, tr.worker-quarantine td { color: #555; font-size: 0.95em; border-top: none; }
td.state.IDLE, td.state.SUCCEEDED { color: #2e7d32; }
td.state.BUSY, td.state.RUNNING { color: #1565c0; }
td.state.LOST, td.state.FAILED, td.state.REVOKED { color: #c62828; font-weight: bold; }
td.state.DRAINING, td.state.QUEUED, td.state.CANCELLED { color: #ef6c00; }
progress { width: 8em; }
section.job-detail { border-top: 2px solid #ccc; margin-top: 1.5em; }
div.chart { display: inline-block; margin: 0.5em 1em 0.5em 0; }
div.chart svg { max-width: 100%; height: auto; border: 1px solid #ddd; }
.note { color: #666; }
form#login { background: white; border: 1px solid #ddd; padding: 1em; max-width: 32em; }
form#login input { width: 22em; }
)css";

// %REFRESH% is replaced by the refresh period in seconds.
constexpr char kScript[] = R"js(
(function () {
  'use strict';
  var KEY = 'slimfit-client-token';
  var REFRESH_MS = %REFRESH% * 1000;
  var timer = null;
  var content = document.getElementById('content');
  var state = document.getElementById('state');
  var login = document.getElementById('login');
  var message = document.getElementById('login-message');
  function remember(token) { try { sessionStorage.setItem(KEY, token); } catch (e) {} }
  function forget() { try { sessionStorage.removeItem(KEY); } catch (e) {} }
  function token() { try { return sessionStorage.getItem(KEY) || ''; } catch (e) { return ''; } }
  // The token may arrive in the URL fragment (#token=...), which browsers never send to a server.
  // Keep it for this tab only and take it out of the address bar and history.
  function takeTokenFromFragment() {
    var match = /(?:^#|&)token=([^&]*)/.exec(window.location.hash);
    if (!match) return;
    try { remember(decodeURIComponent(match[1])); } catch (e) { remember(match[1]); }
    history.replaceState(null, '', window.location.pathname);
  }
  function showLogin(text) {
    clearTimeout(timer);
    content.innerHTML = '';
    login.hidden = false;
    message.textContent = text;
    state.textContent = 'A client token is needed to show the status.';
  }
  function schedule() { clearTimeout(timer); timer = setTimeout(refresh, REFRESH_MS); }
  function refresh() {
    var bearer = token();
    if (!bearer) { showLogin(''); return; }
    fetch('status', { headers: { 'Authorization': 'Bearer ' + bearer }, cache: 'no-store', credentials: 'omit' })
      .then(function (response) {
        if (response.status === 401) {
          forget();
          showLogin('The coordinator did not accept that token.');
          return null;
        }
        if (!response.ok) throw new Error('HTTP ' + response.status);
        return response.text();
      })
      .then(function (html) {
        if (html === null) return;
        login.hidden = true;
        content.innerHTML = html;
        state.textContent = 'Updated ' + new Date().toLocaleTimeString() + '; refreshes every ' +
            (REFRESH_MS / 1000) + ' s.';
        document.body.setAttribute('data-loaded', 'true');
        schedule();
      })
      .catch(function (error) {
        state.textContent = 'Cannot reach the coordinator (' + error.message + '); retrying.';
        schedule();
      });
  }
  login.addEventListener('submit', function (event) {
    event.preventDefault();
    var input = document.getElementById('token');
    remember(input.value.trim());
    input.value = '';
    refresh();
  });
  document.getElementById('forget').addEventListener('click', function (event) {
    event.preventDefault();
    forget();
    showLogin('The token was forgotten.');
  });
  window.addEventListener('hashchange', function () { takeTokenFromFragment(); refresh(); });
  takeTokenFromFragment();
  refresh();
})();
)js";

// 'sha256-<base64>' of `text`, as a Content-Security-Policy source.
std::string CspHash(const std::string& text) {
  std::string digest;
  absl::Base64Escape(absl::HexStringToBytes(base::Sha256Hex(text)), &digest);
  return absl::StrCat("'sha256-", digest, "'");
}

std::string Script(int refresh_seconds) {
  return absl::StrReplaceAll(kScript, {{"%REFRESH%", absl::StrCat(refresh_seconds)}});
}

std::string PageHtml(int refresh_seconds) {
  return absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
      "<meta name=\"referrer\" content=\"no-referrer\"><title>slimfit coordinator</title><style>",
      kStyle,
      "</style></head>\n<body><header><h1>slimfit coordinator</h1><p id=\"state\">Loading…</p>"
      "<a href=\"#\" id=\"forget\">forget the token</a></header>\n"
      "<form id=\"login\" hidden autocomplete=\"off\"><p><label for=\"token\">Client token</label> "
      "<input id=\"token\" type=\"password\" autocomplete=\"off\" required> "
      "<button type=\"submit\">Show the status</button></p><p id=\"login-message\"></p>"
      "<p class=\"note\">The token stays in this tab. You can also open this page as "
      "<code>/#token=…</code>: the part after # never leaves the browser.</p></form>\n"
      "<main id=\"content\"></main>\n<noscript>This page needs JavaScript to send the client token; "
      "<code>slimfit workers</code> and <code>slimfit jobs</code> show the same.</noscript>\n<script>",
      Script(refresh_seconds), "</script></body></html>\n");
}

base::HttpResponse Html(std::string body, const std::string& policy) {
  base::HttpResponse response;
  response.content_type = "text/html; charset=utf-8";
  response.body = std::move(body);
  response.headers.emplace_back("Content-Security-Policy", policy);
  response.headers.emplace_back("Referrer-Policy", "no-referrer");
  response.headers.emplace_back("X-Frame-Options", "DENY");
  return response;
}

}  // namespace

StatusPage::StatusPage(Options options)
    : options_(std::move(options)),
      page_(PageHtml(options_.refresh_seconds)),
      content_security_policy_(
          absl::StrCat("default-src 'none'; script-src ", CspHash(Script(options_.refresh_seconds)),
                       "; style-src ", CspHash(kStyle),
                       "; img-src data:; connect-src 'self'; form-action 'none'; base-uri "
                       "'none'; frame-ancestors 'none'")) {}

std::map<std::string, base::HttpHandler> StatusPage::Routes() {
  return {
      {"/", [this](const base::HttpRequest& request) { return Page(request); }},
      {"/status", [this](const base::HttpRequest& request) { return Status(request); }},
  };
}

base::HttpResponse StatusPage::Page(const base::HttpRequest&) const {
  return Html(page_, content_security_policy_);
}

bool StatusPage::Authorized(const std::string& authorization) const {
  absl::string_view value = absl::StripAsciiWhitespace(authorization);
  constexpr absl::string_view kScheme = "bearer ";
  if (value.size() <= kScheme.size() || !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme)) {
    return false;
  }
  value.remove_prefix(kScheme.size());
  value = absl::StripLeadingAsciiWhitespace(value);
  return !value.empty() && options_.client_tokens->Accepts(value);
}

base::HttpResponse StatusPage::Status(const base::HttpRequest& request) {
  if (!Authorized(request.Header("authorization"))) {
    base::HttpResponse refused;
    refused.status = 401;
    refused.body = "a client token is required: Authorization: Bearer <token>\n";
    refused.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"slimfit coordinator\"");
    return refused;
  }
  return Html(status_views::RenderStatusFragment(Snapshot()),
              "default-src 'none'; style-src 'unsafe-inline'");
}

status_views::StatusSnapshot StatusPage::Snapshot() {
  Coordinator& coordinator = *options_.coordinator;
  status_views::StatusSnapshot snapshot;
  snapshot.now = absl::Now();
  for (v1::WorkerInfo& worker : coordinator.registry().List(/*include_gone=*/true)) {
    if (worker.state() != v1::WORKER_STATE_LEFT) snapshot.workers.push_back(std::move(worker));
  }
  v1::ListJobsRequest list;
  list.set_page_size(options_.max_jobs);
  if (absl::StatusOr<v1::ListJobsResponse> jobs = coordinator.ListJobs(list); jobs.ok()) {
    snapshot.jobs.assign(jobs->jobs().begin(), jobs->jobs().end());
    snapshot.more_jobs = !jobs->next_page_token().empty();
  }

  // Every job that is not finished, then the newest finished one, up to max_details.
  std::vector<const v1::Job*> shown;
  for (const v1::Job& job : snapshot.jobs) {
    if (!IsTerminal(job.state()) && static_cast<int>(shown.size()) < options_.max_details)
      shown.push_back(&job);
  }
  for (const v1::Job& job : snapshot.jobs) {
    if (IsTerminal(job.state())) {
      if (static_cast<int>(shown.size()) < options_.max_details) shown.push_back(&job);
      break;
    }
  }
  std::set<std::string> active;
  for (const v1::Job* job : shown) {
    status_views::JobDetail detail;
    detail.job = *job;
    if (absl::StatusOr<std::vector<v1::JobEvent>> events = coordinator.JobEvents(job->job_id());
        events.ok()) {
      detail.events = *std::move(events);
    }
    if (!IsTerminal(job->state())) {
      active.insert(job->job_id());
      for (const v1::WorkerInfo& worker : snapshot.workers) {
        for (const v1::WorkerJobPlan& plan : worker.plans()) {
          if (plan.job_id() == job->job_id()) detail.plan_charts.push_back(PlanChart(*job, worker));
        }
      }
    }
    snapshot.details.push_back(std::move(detail));
  }
  absl::MutexLock lock(&mutex_);
  for (auto it = charts_.begin(); it != charts_.end();) {
    it = active.count(std::get<0>(it->first)) > 0 ? std::next(it) : charts_.erase(it);
  }
  return snapshot;
}

status_views::WorkerPlanChart StatusPage::PlanChart(const v1::Job& job, const v1::WorkerInfo& worker) {
  const ChartKey key{job.job_id(), worker.worker_id(), worker.incarnation(), worker.memory_budget_bytes()};
  {
    absl::MutexLock lock(&mutex_);
    auto cached = charts_.find(key);
    if (cached != charts_.end()) return cached->second;
  }
  status_views::WorkerPlanChart chart;
  chart.worker_id = worker.worker_id();
  absl::StatusOr<WorkerPlanSearch> search =
      options_.coordinator->SearchPlansForJob(job.job_id(), worker.worker_id());
  if (search.ok()) {
    absl::StatusOr<std::string> svg = planner::PlanFrontierSvg(
        search->result, search->budget_bytes, search->usable_bytes,
        absl::StrCat(worker.worker_id(), " for ", job.job_id(),
                     ": plans for L = ", job.spec().sequence_length(), " within ",
                     planner::HumanBytes(static_cast<double>(search->budget_bytes))));
    if (svg.ok()) {
      chart.svg = *std::move(svg);
    } else {
      chart.error = std::string(svg.status().message());
    }
  } else {
    chart.error = std::string(search.status().message());
  }
  absl::MutexLock lock(&mutex_);
  charts_[key] = chart;
  return chart;
}

}  // namespace slimfit::server
