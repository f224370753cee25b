// One acquisition's decisions, sans I/O.
#include "lock/core/acquisition.hpp"

#include "lock/base/errors.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/error.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace colock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using std::chrono::milliseconds;

namespace {

acquisition_terms terms_of(lock_options const& opt, std::string_view kind, bool wait) {
    acquisition_terms t;
    t.options = &opt;
    t.kind = kind;
    t.wait = wait;
    return t;
}

} // namespace

acquisition_terms acquisition_terms::lock(lock_options const& opt, std::string_view kind,
                                          bool wait) {
    auto t = terms_of(opt, kind, wait);
    t.server_change_retries = 3;
    return t;
}

acquisition_terms acquisition_terms::permits(lock_options const& opt, std::string_view kind,
                                             bool wait) {
    auto t = terms_of(opt, kind, wait);
    t.token_once = true;
    t.wakes = wake_rule::permits;
    t.message_when_empty = true;
    return t;
}

acquisition::acquisition(acquisition_terms const& terms, clock_type::time_point started)
    : terms_(terms) {
    auto const& opt = *terms_.options;
    deadlines_.wait = opt.wait_timeout ? saturating_add(started, *opt.wait_timeout)
                                       : clock_type::time_point::max();
    deadlines_.first_connect =
        std::min(deadlines_.wait, saturating_add(started, opt.first_connect_timeout));
}

acquisition_action acquisition::finish(acquisition_end end, error_code ec) const {
    acquisition_action a;
    a.step = acquisition_step::finish;
    a.end = end;
    a.ec = ec;
    return a;
}

acquisition_action acquisition::aborted() noexcept {
    acquisition_action a;
    a.step = acquisition_step::finish;
    a.end = acquisition_end::aborted;
    a.ec = asio::error::operation_aborted;
    return a;
}

bool acquisition::ends_call(asio::cancellation_type type) noexcept {
    return (type & (asio::cancellation_type::terminal | asio::cancellation_type::partial)) !=
           asio::cancellation_type::none;
}

acquisition_action acquisition::begin_attempt(bool stopping) const {
    if (stopping)
        return aborted();
    acquisition_action a;
    a.step = acquisition_step::ask;
    a.until = deadlines_.attempt_limit();
    return a;
}

acquisition_action acquisition::on_answer(store_answer const& answer, clock_type::time_point now,
                                          bool stopping) {
    auto r = answer.result;
    if (!r.ec && r.granted && answer.server_changed) {
        // Granted by a server instance that has been replaced since (its keys may be gone, and
        // the leases it granted were marked lost): ask the new one, with the same token.
        if (!stopping && server_rounds_ < terms_.server_change_retries) {
            ++server_rounds_;
            return begin_attempt(false);
        }
        // The server keeps changing: as a reply that was lost (a passing error, so a waiting
        // call asks again), the token released on the way out.
        r.ec = redis::error::connection_lost;
        r.granted = false;
        r.outcome_unknown = true;
    }
    server_rounds_ = 0;
    ++attempts_;
    answer_ = std::move(r);
    if (answer_.outcome_unknown && !terms_.token_once)
        outcome_unknown_ = true; // it may have been applied: released on the way out
    if (answer_.granted)
        queued_at_server_ = false; // the grant took the call's entry out
    acquisition_action give_back;
    give_back.step = acquisition_step::give_back;
    if (answer_.granted && stopping) {
        // Granted to a call cancelled meanwhile: given back before the call ends.
        answer_.granted = false;
        answer_.ec = asio::error::operation_aborted;
        answer_queued_ = false;
        abort_after_give_back_ = true;
        return give_back;
    }
    if (answer_.granted && !lease_left_to_pass(answer.lease_end, now)) {
        // The reply was read when the lease it granted was over, or all but (a starved process,
        // or a round trip as long as the ttl): its holder would never own it. Given back, and
        // answered as held by another that is gone meanwhile: a waiting call asks again at
        // once, a single attempt finds nothing.
        answer_.granted = false;
        answer_.holder_ttl = milliseconds(0);
        answer_queued_ = terms_.wait;
        queued_at_server_ = queued_at_server_ || answer_queued_;
        give_back.new_token = terms_.token_once;
        abort_after_give_back_ = false;
        return give_back;
    }
    answer_queued_ = terms_.wait && !answer_.granted && (!answer_.ec || answer_.outcome_unknown);
    queued_at_server_ = queued_at_server_ || answer_queued_;
    if (answer_.outcome_unknown && terms_.token_once) {
        // It may have granted to this token, or queued it: given back now.
        give_back.new_token = true;
        abort_after_give_back_ = false;
        return give_back;
    }
    return decide(now, stopping);
}

acquisition_action acquisition::on_given_back(bool released, clock_type::time_point now,
                                              bool stopping) {
    if (!released && !terms_.token_once)
        outcome_unknown_ = true; // the token may still be there: released once more at the end
    if (terms_.token_once) {
        // The give-back took the token's entry out of the server's queue with it.
        answer_queued_ = false;
        queued_at_server_ = false;
    }
    if (abort_after_give_back_) {
        abort_after_give_back_ = false;
        return aborted();
    }
    return decide(now, stopping);
}

acquisition_action acquisition::decide(clock_type::time_point now, bool stopping) {
    if (answer_.ec == asio::error::operation_aborted && !stopping)
        answer_.ec = error::timeout; // stopped by the wait deadline before it was sent
    note_attempt(deadlines_, answer_.ec, answer_.server_text, now);
    attempt_context const context{terms_.wait, in_queue_ || attempts_ > 1, deadlines_,
                                  terms_.options->retry.max};
    auto const next = decide_after_attempt(answer_, context, stopping, now);
    switch (next.step) {
    case next_step::acquired:
        return finish(acquisition_end::acquired, {});
    case next_step::not_acquired:
        return finish(acquisition_end::not_acquired, {});
    case next_step::fail_timeout:
        return finish(acquisition_end::timed_out, error::timeout);
    case next_step::fail:
        return finish(acquisition_end::failed, answer_.ec);
    case next_step::aborted:
        return aborted();
    case next_step::wait:
        break;
    }
    sleep_ = next.sleep;
    failed_ = static_cast<bool>(answer_.ec);
    acquisition_action a;
    a.step = acquisition_step::wait;
    return a;
}

acquisition_action acquisition::keep_waiting(clock_type::time_point now) const {
    if (now >= deadlines_.wait)
        return finish(acquisition_end::timed_out, error::timeout);
    acquisition_action a;
    a.step = acquisition_step::wait;
    return a;
}

acquisition_action acquisition::on_sleep_end(clock_type::time_point now, bool woken,
                                             bool stopping) const {
    // A wake-up asks even at the deadline (the attempt then stops at once while unsent); the
    // timer's end at the deadline is the wait's end.
    if (!woken && !stopping && now >= deadlines_.wait)
        return finish(acquisition_end::timed_out, error::timeout);
    return begin_attempt(stopping);
}

clock_type::time_point acquisition::wakes_at(clock_type::time_point now, bool listening,
                                             std::minstd_rand& rng) const {
    auto const nap = backoff(terms_.options->retry, std::max(attempts_ - 1, 0), rng);
    if (terms_.wakes == acquisition_terms::wake_rule::queue_head)
        // A head asks again at least every queue_refresh_interval, keeping its entry alive.
        return head_wakes_at(now, deadlines_.attempt_limit(),
                             std::min(sleep_, queue_refresh_interval), nap);
    if (failed_)
        return head_wakes_at(now, deadlines_.attempt_limit(), sleep_, nap);
    return permit_wakes_at(now, deadlines_.wait, sleep_, listening, nap);
}

std::string acquisition::ending_text(acquisition_action const& done, link_facts const& link) const {
    auto const& opt = *terms_.options;
    switch (done.end) {
    case acquisition_end::timed_out:
        return wait_timeout_text(opt, link.connected, link.last_error);
    case acquisition_end::failed: {
        auto text =
            attempt_failure_text(done.ec, answer_.server_text, opt, terms_.wait, link.last_error);
        if (text.empty() && terms_.message_when_empty)
            return done.ec.message();
        return with_acl_pointer(std::move(text), terms_.kind);
    }
    case acquisition_end::acquired:
    case acquisition_end::not_acquired:
    case acquisition_end::aborted:
        break;
    }
    return {};
}

acquisition_failure acquisition::failure(acquisition_action const& done, link_facts const& link,
                                         std::string_view name) const {
    return {error_code(done.ec.value(), done.ec.category()),
            acquisition_message(terms_.kind, name, ending_text(done, link))};
}

std::string acquisition_message(std::string_view kind, std::string_view name,
                                std::string const& detail) {
    return detail.empty() ? fmt::format("colock: {} '{}'", kind, name)
                          : fmt::format("colock: {} '{}': {}", kind, name, detail);
}

} // namespace colock::detail
