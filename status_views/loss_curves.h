// A job's loss curves drawn from its events as an SVG chart (base/svg_chart.h): the training loss of
// every RoundCompleted and the held-out loss of every Evaluation, in nats per predicted token. Used
// by `slimfit status --svg` (events read with WatchJob) and by the coordinator's status page (events
// read from its store).
//
// Thread safety: a pure function.
#ifndef SLIMFIT_STATUS_VIEWS_LOSS_CURVES_H_
#define SLIMFIT_STATUS_VIEWS_LOSS_CURVES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/slimfit.pb.h"

namespace slimfit::status_views {

// Events of other kinds are ignored; a round recomputed after a rollback counts with its last
// value. FAILED_PRECONDITION when no round has completed and no evaluation has run yet.
absl::StatusOr<std::string> LossCurvesSvg(const std::vector<v1::JobEvent>& events, const std::string& title);

}  // namespace slimfit::status_views

#endif  // SLIMFIT_STATUS_VIEWS_LOSS_CURVES_H_
