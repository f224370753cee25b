// One acquisition's decisions, sans I/O: the machine that a mutex's co_lock / co_try_lock and a
// semaphore's (or read-write lock's) acquire drive. Each event the driver saw (the store's
// answer, a give-back done, a sleep's end, a wake-up, the caller's cancellation) goes in with
// the time it happened; what to do next comes out: ask the store, give a grant back, wait on,
// or finish with a result whose text the machine words. The drivers keep the I/O (the request,
// the release, the timer, the subscription, the local queue) and nothing of the rules: the wait
// deadlines, a grant from a replaced server, a grant read too late or for a cancelled call, the
// "stopped by the wait deadline" rewrite, the "may be queued at the server" bit, when to try
// again and how long to sleep. A connection change comes in as a wake-up (a reconnection: ask
// now) or as an answer's error (a connect failure, which bounds the next attempt by
// first_connect_timeout). Private to the library's sources; tested without a server in
// test/unit/test_acquisition.cpp and test_acquisition_walk.cpp.
#pragma once

#include "lock/base/common.hpp"
#include "lock/core/acquire_policy.hpp"
#include "lock/store/lease_store.hpp"

#include <colock/lock_options.hpp>

#include <boost/asio/cancellation_type.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <random>
#include <string>
#include <string_view>

namespace colock::detail {

// How one synchronizer's acquisition differs from another's; the rules are the same.
struct acquisition_terms {
    lock_options const* options = nullptr; // the call's; outlives the machine
    std::string_view kind;                 // what the user made, in texts: "lock", "semaphore"
    bool wait = true;                      // waits (co_lock); else one attempt (co_try_lock)
    // How many times a grant from a server instance replaced while the request was out is asked
    // for again (the same token: the grant is idempotent) before it counts as a lost reply.
    int server_change_retries = 0;
    // A token is granted once (a semaphore's holding): an attempt of unknown outcome is given
    // back at once, its queue entry with it, and the call goes on under a new token. Otherwise
    // (a lock's token, asked for again safely) it is released when the call ends.
    bool token_once = false;
    // How long a wait sleeps between attempts while not told by a message: a queue head's rule
    // (the holder's lease, at most queue_refresh_interval, or the backoff), or the permits'
    // (permit_wakes_at, which trusts the messages while subscribed).
    enum class wake_rule { queue_head, permits } wakes = wake_rule::queue_head;
    // A failure with no text of its own (no server text, no connection account) shows its
    // error's message.
    bool message_when_empty = false;

    // A lock's (the mutex, the election): asked again over a changing server up to 3 times.
    static acquisition_terms lock(lock_options const& opt, std::string_view kind, bool wait);
    // A semaphore's or read-write lock's permits.
    static acquisition_terms permits(lock_options const& opt, std::string_view kind, bool wait);
};

// What the driver does next.
enum class acquisition_step {
    ask,       // send the acquire; it stops at `until` while unsent (request_stop)
    give_back, // release the grant just read (its token's queue entry with it when `new_token`,
               // and the call goes on under a new token); then on_given_back()
    wait,      // not acquired, and the call waits on: the driver's own wake-ups first (a lease
               // handed over, a message), then keep_waiting() and wakes_at()
    finish,    // done: `end`, with `ec` (see ending_text())
};

enum class acquisition_end {
    acquired,     // the grant is the caller's: the driver makes its guard
    not_acquired, // co_try_lock found it held: an empty result
    failed,       // the attempt's error (`ec`)
    timed_out,    // error::timeout: the wait deadline came
    aborted,      // operation_aborted: the caller cancelled (a grant was given back first)
};

struct acquisition_action {
    acquisition_step step = acquisition_step::ask;
    clock_type::time_point until = clock_type::time_point::max(); // ask
    bool new_token = false;                                       // give_back
    acquisition_end end = acquisition_end::acquired;              // finish
    boost::system::error_code ec;                                 // finish: none, or why not

    // A finish that reports an error (failed, timed out, aborted).
    bool fails() const noexcept {
        return step == acquisition_step::finish && end != acquisition_end::acquired &&
               end != acquisition_end::not_acquired;
    }
};

// The store's answer to one request, as the driver read it.
struct store_answer {
    grant_result result;
    // How long a grant is known to be ours: the request's sending plus the store's safe ttl.
    clock_type::time_point lease_end{};
    // The server instance the request went to has been replaced since it was made.
    bool server_changed = false;
};

// How a failing finish reports: its code, without the source location Asio attaches (the
// message is about the synchronizer, not where in Asio the error was noticed), and its message,
// which names the synchronizer.
struct acquisition_failure {
    boost::system::error_code ec;
    std::string message;
};

// The connection as it stands when a failure is worded.
struct link_facts {
    bool connected = false;
    std::string last_error; // the connection's account of its last failure
};

class acquisition {
public:
    // The call started at `started`: its deadlines count from there.
    acquisition(acquisition_terms const& terms, clock_type::time_point started);

    // Before an attempt: a cancellation (`stopping`: the caller's, or the synchronizer closed)
    // ends the call; else ask, by the attempt's deadline.
    acquisition_action begin_attempt(bool stopping) const;
    // The store answered at `now`.
    acquisition_action on_answer(store_answer const& answer, clock_type::time_point now,
                                 bool stopping);
    // The give-back asked for is done (`released`: the store confirmed it).
    acquisition_action on_given_back(bool released, clock_type::time_point now, bool stopping);
    // The call waits on at `now` (after an answer, or woken while parked): the wait deadline
    // ends it, else wait.
    acquisition_action keep_waiting(clock_type::time_point now) const;
    // A sleep ended at `now`, by a wake-up (`woken`: a message, a reconnection) or its timer.
    acquisition_action on_sleep_end(clock_type::time_point now, bool woken, bool stopping) const;
    // When a waiting call that is not woken asks again, sleeping from `now`; `listening`: the
    // call is told by messages (subscribed). Draws its backoff from `rng`.
    clock_type::time_point wakes_at(clock_type::time_point now, bool listening,
                                    std::minstd_rand& rng) const;

    // The call joined a local queue (a lock's): its attempts are a head's from now on, and a
    // cancellation that arrives while one is out wins over that attempt's error.
    void joined_local_queue() noexcept { in_queue_ = true; }
    // Another holder of this process took the lease: the next sleep waits for its release, up
    // to `lease` (the lock's ttl).
    void wait_for_holder(std::chrono::milliseconds lease) noexcept {
        sleep_ = lease;
        failed_ = false;
    }

    // The text a finish reports after the synchronizer's name (empty: none).
    std::string ending_text(acquisition_action const& done, link_facts const& link) const;
    // The report of `done`, a failing finish, for the synchronizer called `name`.
    acquisition_failure failure(acquisition_action const& done, link_facts const& link,
                                std::string_view name) const;

    // Whether the caller's cancellation of this type ends the call: terminal and partial do;
    // total does not, since the call may have asked already.
    static bool ends_call(boost::asio::cancellation_type type) noexcept;
    // The finish of a call that a cancellation ended.
    static acquisition_action aborted() noexcept;

    wait_deadlines const& deadlines() const noexcept { return deadlines_; }
    // The attempts answered so far.
    int attempts() const noexcept { return attempts_; }
    // The last answer, as decided (a grant given back reads as not granted).
    grant_result const& answer() const noexcept { return answer_; }
    // The last answer may have queued the call at the server (or kept it there).
    bool queued_by_answer() const noexcept { return answer_queued_; }
    // The call may have an entry in the server's queue: an answer queued it, and no grant or
    // give-back took it out since.
    bool queued_at_server() const noexcept { return queued_at_server_; }
    // An attempt may have been applied without our knowing (not token_once): the call releases
    // its token on the way out.
    bool outcome_unknown() const noexcept { return outcome_unknown_; }

private:
    // After the answer's grant was settled: the rewrites, then what comes next.
    acquisition_action decide(clock_type::time_point now, bool stopping);
    acquisition_action finish(acquisition_end end, boost::system::error_code ec) const;

    acquisition_terms terms_;
    wait_deadlines deadlines_;
    grant_result answer_;
    // After the give-back asked for: finish aborted (a cancelled call's grant), else decide.
    bool abort_after_give_back_ = false;
    bool in_queue_ = false;
    bool answer_queued_ = false;
    bool queued_at_server_ = false;
    bool outcome_unknown_ = false;
    int attempts_ = 0;
    int server_rounds_ = 0; // asked again over a changed server, in this attempt
    // The wait: how long to sleep before asking again, and whether the last answer failed.
    std::chrono::milliseconds sleep_{0};
    bool failed_ = false;
};

// A failure's message: "colock: <kind> '<name>'", then ": <detail>" when there is one.
std::string acquisition_message(std::string_view kind, std::string_view name,
                                std::string const& detail);

} // namespace colock::detail
