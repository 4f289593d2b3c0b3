#include "serving/admission.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace gpusched::serving {

const char* RejectReasonName(RejectReason reason) {
  switch (reason) {
    case RejectReason::kNone:
      return "none";
    case RejectReason::kRateLimitedRequests:
      return "rate_limited_requests";
    case RejectReason::kRateLimitedTokens:
      return "rate_limited_tokens";
    case RejectReason::kModelQueueFull:
      return "model_queue_full";
    case RejectReason::kTenantQueueFull:
      return "tenant_queue_full";
    case RejectReason::kDeadlineInfeasible:
      return "deadline_infeasible";
    case RejectReason::kQueueTimeout:
      return "queue_timeout";
    case RejectReason::kPromptTooLong:
      return "prompt_too_long";
    case RejectReason::kNoReplica:
      return "no_replica";
    case RejectReason::kTenantConcurrency:
      return "tenant_concurrency_limit";
  }
  return "unknown";
}

TokenBucket::TokenBucket(double rate_per_second, double burst)
    : rate_(rate_per_second), burst_(burst), level_(burst) {}

void TokenBucket::Refill(Micros now) {
  if (now > last_) {
    level_ = std::min(burst_, level_ + rate_ * ToSeconds(now - last_));
    last_ = now;
  }
}

void TokenBucket::Reconfigure(double rate_per_second, double burst,
                              Micros now) {
  if (rate_per_second <= 0) {
    *this = TokenBucket();
    return;
  }
  if (unlimited()) {
    *this = TokenBucket(rate_per_second, burst);
    last_ = now;
    return;
  }
  Refill(now);
  rate_ = rate_per_second;
  burst_ = burst;
  level_ = std::min(level_, burst_);
}

bool TokenBucket::TryTake(double n, Micros now) {
  if (unlimited()) return true;
  Refill(now);
  if (level_ < n && !(n > burst_ && level_ >= burst_)) return false;
  // A cost larger than the whole burst passes when the bucket is full, so a
  // single large request is never rejected forever.
  level_ -= n;
  return true;
}

void TokenBucket::Give(double n, Micros now) {
  if (unlimited()) return;
  Refill(now);
  level_ = std::min(burst_, level_ + n);
}

void TokenBucket::Force(double n, Micros now) {
  if (unlimited()) return;
  Refill(now);
  level_ -= n;
}

Micros TokenBucket::TimeUntil(double n, Micros now) {
  if (unlimited()) return 0;
  Refill(now);
  const double need = std::min(n, burst_) - level_;
  if (need <= 0) return 0;
  return static_cast<Micros>(std::ceil(need / rate_ * kMicrosPerSecond));
}

double TokenBucket::level(Micros now) {
  Refill(now);
  return level_;
}

absl::Status ValidateTenantLimits(const TenantLimits& l) {
  if (!(l.requests_per_minute >= 0) || !(l.tokens_per_minute >= 0)) {
    return absl::InvalidArgumentError(
        "requests_per_minute and tokens_per_minute must be >= 0 (0 is "
        "unlimited)");
  }
  if (!(l.burst_minutes > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("burst_minutes must be > 0, got ", l.burst_minutes));
  }
  if (l.max_queued < 0 || l.max_concurrency < 0) {
    return absl::InvalidArgumentError(
        "max_queued and max_concurrency must be >= 0 (0 is unbounded)");
  }
  return absl::OkStatus();
}

Admission::TenantState& Admission::State(TenantId t) {
  if (tenants_.size() <= t) tenants_.resize(t + 1);
  return tenants_[t];
}

void Admission::SetTenantLimits(TenantId tenant, const TenantLimits& l,
                                Micros now) {
  TenantState& s = State(tenant);
  s.limits = l;
  Reconfigure(s, now);
}

void Admission::SetTenantShare(TenantId tenant, const TenantShare& share,
                               Micros now) {
  TenantState& s = State(tenant);
  s.share = share;
  s.share.rate = std::clamp(share.rate, 0.0, 1.0);
  Reconfigure(s, now);
}

void Admission::Reconfigure(TenantState& s, Micros now) {
  const TenantLimits& l = s.limits;
  auto set = [&](TokenBucket& b, double per_minute) {
    // A share of 0 still refills (slowly): 1e-9 of the rate, never
    // "unlimited".
    const double rate = per_minute / 60.0 * std::max(s.share.rate, 1e-9);
    b.Reconfigure(per_minute > 0 ? rate : 0,
                  per_minute * l.burst_minutes * s.share.rate, now);
  };
  set(s.requests, l.requests_per_minute);
  set(s.tokens, l.tokens_per_minute);
}

int64_t Admission::Bound(int64_t limit, int64_t share) {
  if (limit <= 0) return 0;  // unbounded
  if (share < 0) return limit;
  return share == 0 ? -1 : std::min(limit, share);
}

Verdict Admission::Admit(const Request& r, const QueueOutlook& outlook,
                         Micros now) {
  TenantState& s = State(r.tenant);
  const double tokens =
      static_cast<double>(r.input_tokens) + std::max(0, r.max_output_tokens);
  if (!s.requests.unlimited() && s.requests.level(now) < 1.0) {
    return {RejectReason::kRateLimitedRequests, s.requests.TimeUntil(1, now)};
  }
  if (!s.tokens.unlimited() && !s.tokens.TryTake(tokens, now)) {
    return {RejectReason::kRateLimitedTokens, s.tokens.TimeUntil(tokens, now)};
  }
  // From here on a rejection must give the tokens back.
  Verdict v;
  if (outlook.model_queue_limit > 0 &&
      outlook.model_queued >= outlook.model_queue_limit) {
    v = {RejectReason::kModelQueueFull, outlook.predicted_drain};
  } else if (const int64_t q = Bound(s.limits.max_queued, s.share.max_queued);
             q != 0 && s.queued >= std::max<int64_t>(0, q)) {
    v = {RejectReason::kTenantQueueFull, outlook.predicted_drain};
  } else if (const int64_t c =
                 Bound(s.limits.max_concurrency, s.share.max_concurrency);
             c != 0 && s.active >= std::max<int64_t>(0, c)) {
    v = {RejectReason::kTenantConcurrency, outlook.predicted_drain};
  } else if (r.deadline != kNever && outlook.predicted_first_token != kNever &&
             outlook.predicted_first_token > r.deadline) {
    v = {RejectReason::kDeadlineInfeasible, outlook.predicted_drain};
  }
  if (!v.admitted()) {
    s.tokens.Give(tokens, now);
    return v;
  }
  s.requests.TryTake(1, now);
  ++s.queued;
  ++s.active;
  return v;
}

void Admission::OnDequeued(const Request& r) {
  TenantState& s = State(r.tenant);
  if (s.queued > 0) --s.queued;
}

void Admission::OnCompleted(const Request& r, int32_t output_tokens,
                            Micros now) {
  TenantState& s = State(r.tenant);
  if (s.active > 0) --s.active;
  const double delta = static_cast<double>(std::max(0, r.max_output_tokens)) -
                       static_cast<double>(output_tokens);
  if (delta > 0) {
    s.tokens.Give(delta, now);
  } else if (delta < 0) {
    s.tokens.Force(-delta, now);
  }
}

void Admission::OnNotServed(const Request& r, Micros now) {
  TenantState& s = State(r.tenant);
  if (s.active > 0) --s.active;
  s.tokens.Give(
      static_cast<double>(r.input_tokens) + std::max(0, r.max_output_tokens),
      now);
  s.requests.Give(1, now);
}

}  // namespace gpusched::serving
