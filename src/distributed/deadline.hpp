#pragma once
// now + timeout without overflow: a timeout of centuries or
// milliseconds::max() means "wait as long as the clock can count", not a
// wrapped-around deadline in the past that times out at once.
#include <chrono>

namespace rumus::distributed::detail {

template <class Clock, class Rep, class Period>
typename Clock::time_point saturating_deadline(typename Clock::time_point now,
                                               std::chrono::duration<Rep, Period> timeout) {
  using TimePoint = typename Clock::time_point;
  if (timeout <= timeout.zero()) return now;
  // Compare in the timeout's own unit, rounded down, so nothing here overflows.
  const auto room = std::chrono::duration_cast<std::chrono::duration<Rep, Period>>(TimePoint::max() - now);
  if (timeout >= room) return TimePoint::max();
  return now + std::chrono::duration_cast<typename Clock::duration>(timeout);
}

}  // namespace rumus::distributed::detail
