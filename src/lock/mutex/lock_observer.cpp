// The names of the observer's enumerations.
#include <colock/lock_observer.hpp>

namespace colock {

std::string_view to_string(acquired_by how) noexcept {
    switch (how) {
    case acquired_by::first_attempt:
        return "first_attempt";
    case acquired_by::server_after_wait:
        return "server_after_wait";
    case acquired_by::local_handoff:
        return "local_handoff";
    case acquired_by::retained:
        return "retained";
    }
    return "unknown";
}

std::string_view to_string(loss_reason why) noexcept {
    switch (why) {
    case loss_reason::not_ours:
        return "not_ours";
    case loss_reason::expired:
        return "expired";
    case loss_reason::server_replaced:
        return "server_replaced";
    case loss_reason::forced:
        return "forced";
    }
    return "unknown";
}

} // namespace colock
