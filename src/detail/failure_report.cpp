// This thread's failure report: see failure_report.hpp.
#include "detail/failure_report.hpp"

#include <utility>

namespace colock::detail {

namespace {
thread_local failure_report const* current_report = nullptr;
} // namespace

failure_report_scope::failure_report_scope(failure_report const& report) noexcept
    : previous_(current_report) {
    current_report = &report;
}

failure_report_scope::~failure_report_scope() {
    current_report = previous_;
}

failure_report const* take_failure_report() noexcept {
    return std::exchange(current_report, nullptr);
}

} // namespace colock::detail
