// Runs Lua scripts and the few plain commands a synchronizer needs on one connection's engine,
// knowing nothing of what the scripts do: as Redis Functions (FCALL, the library loaded when the
// server lacks it) or by SHA (EVALSHA, SCRIPT LOAD on NOSCRIPT), never with their source on a
// call; with WAIT behind in the same pipeline; tried again over passing errors under a deadline
// that one timer keeps for every request; and the listener that carries the engine's pushes and
// events to a synchronizer's strand. The stores build their keys and arguments and read the replies
// (the pure parsers of lock_replies.hpp); this is the only unit of the lock layer that talks to the
// engine. Private to the library's sources.
#pragma once

#include "lock/base/common.hpp"
#include "lock/store/call_form.hpp"
#include "lock/store/channel_events.hpp"
#include "lock/store/lease_store.hpp"
#include "lock/store/scripts.hpp"

#include <colock/log.hpp>
#include <colock/redis/connection.hpp>
#include <colock/resp3/request.hpp>
#include <colock/resp3/value.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/strand.hpp>
#include <boost/system/error_code.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace colock::detail {

// One reply: `ec` empty and `value` the answer; redis::error::server_error and `value` the error
// reply (the server's words in its text); any other code (the network's, unexpected_reply,
// operation_aborted, timeout) with an empty value.
struct script_reply {
    boost::system::error_code ec;
    resp3::value value;

    // The server's words when it refused, else empty.
    std::string_view server_text() const noexcept;
};

// A request's outcome as a script_reply: its last reply (a request that answered nothing is an
// unexpected_reply).
script_reply last_reply(boost::system::error_code ec, redis::response&& resp);

// The replicas' answer to a WAIT.
struct wait_reply {
    std::int64_t replicas = 0;
    std::string refusal; // the server's text when it refused WAIT (an ACL without it)
};

// A script with its keys and arguments: views of the caller's, which outlive the call.
struct script_call {
    script const& code;
    std::initializer_list<std::string_view> keys;
    std::initializer_list<std::string_view> args;
    // One more key after `keys` when not empty: one the script takes when the caller has it
    // (a lease's record).
    std::string_view last_key = {};
    // Keys after those, and arguments after `args`, for a call whose count is known only when
    // it is made (a batch of renewals).
    std::span<std::string_view const> more_keys = {};
    std::span<std::string_view const> more_args = {};
};

// How a request that failed for a passing reason (is_transient) is tried again: at most `tries`
// times, pausing first_pause, doubled each time up to max_pause, and never past `timeout` from
// the start (which fails the request in flight with error::timeout).
struct retry_schedule {
    int tries = 1;
    std::chrono::milliseconds first_pause{0};
    std::chrono::milliseconds max_pause{0};
    std::chrono::milliseconds timeout{0};

    std::chrono::milliseconds pause(int round) const noexcept;
};

// A release is sent again over passing errors until release_timeout, pausing 20 ms, doubled up
// to 250 ms.
inline constexpr retry_schedule release_retries{std::numeric_limits<int>::max(),
                                                std::chrono::milliseconds{20},
                                                std::chrono::milliseconds{250}, release_timeout};
// Leaving a queue: a few tries, no more; the entry (and a hand-off's claim) lapse by themselves.
inline constexpr retry_schedule leave_retries{3, std::chrono::milliseconds{50},
                                              std::chrono::milliseconds{200}, release_timeout};

class script_client : public std::enable_shared_from_this<script_client> {
public:
    // The client's timers and background work run on `strand`.
    script_client(redis::detail::shared_engine engine,
                  boost::asio::strand<boost::asio::any_io_executor> strand);
    script_client(script_client const&) = delete;
    script_client& operator=(script_client const&) = delete;
    ~script_client();

    boost::asio::strand<boost::asio::any_io_executor> const& strand() const noexcept {
        return strand_;
    }
    // The scripts as this connection's server takes them, chosen once (scripts.hpp).
    script_set const& scripts() const noexcept { return scripts_; }

    // How this connection calls the scripts now (call_form).
    call_form form() const noexcept { return form_.load(std::memory_order_relaxed); }

    // Runs `call`, cancelled through `cancel_by` when given (an empty slot: not cancellable),
    // else through the awaiting coroutine's own cancellation. A cancellation is honoured while
    // the request is unsent, as the engine's. A server without the script (a restart, SCRIPT or
    // FUNCTION FLUSH) is given it and asked again, once, in the same request as the load; the
    // repeat goes out behind requests sent after the first call, so it is sent only while
    // `wanted()` (when given) answers true, checked on the caller's strand just before.
    boost::asio::awaitable<script_reply>
    run(script_call call, std::optional<boost::asio::cancellation_slot> cancel_by = std::nullopt,
        std::function<bool()> const& wanted = {});

    // Runs `call` with WAIT `replicas` `timeout` behind it in the same pipeline, so that WAIT
    // counts the replicas that have the script's writes (a reconnection in between fails the
    // request instead).
    boost::asio::awaitable<std::pair<script_reply, wait_reply>>
    run_then_wait(script_call call, std::size_t replicas, std::chrono::milliseconds timeout,
                  boost::asio::cancellation_slot cancel_by);

    // Runs `call` again over passing errors as `schedule` says, while `wanted()` (when given)
    // answers true; the last reply, or error::timeout. Not cancellable.
    boost::asio::awaitable<script_reply> run_retrying(script_call call, retry_schedule schedule,
                                                      std::function<bool()> wanted = {});

    // Hands `call` to the engine now, on the caller's thread, so that it goes out before
    // anything the caller does next; `done` gets the reply on the engine's strand (after the
    // script was given to a server that lacked it, and the call repeated).
    void run_detached(script_call call, std::function<void(script_reply)> done);

    // A plain request.
    boost::asio::awaitable<script_reply> exec(resp3::request req, bool cancellable = true);
    void exec_detached(resp3::request req, std::function<void(script_reply)> done);

    // Listening on `channel` for the listener's prefix: completes when the deployment confirmed,
    // or refused (redis::error::server_error and its text), or could not be reached. Not
    // cancellable.
    boost::asio::awaitable<std::pair<boost::system::error_code, std::string>>
    subscribe(std::string const& channel);
    // Fire and forget.
    void unsubscribe(std::string const& channel);

    // Sends messages on channels starting with `channel_prefix`, reconnections and server
    // changes to `events` on the strand until stop_listening(); the connection's close for as
    // long as this client lives.
    void listen(std::weak_ptr<channel_events> events, std::string channel_prefix);
    void stop_listening();

    // The engine's facts.
    bool is_connected() const noexcept;
    std::string last_error_text() const;
    std::uint64_t server_changes_for(std::string_view key) const noexcept;
    std::uint64_t reconnects() const noexcept;
    bool logs(log_level level) const noexcept;
    void log(log_level level, std::string_view line) const noexcept;

private:
    class listener;

    // A deadline of run_retrying: `stop` cancels the request in flight when it fires.
    struct deadline_state {
        boost::asio::cancellation_signal stop;
        bool fired = false;
    };
    struct watched_deadline {
        clock_type::time_point at;
        std::weak_ptr<deadline_state> deadline;
    };
    void watch(clock_type::time_point at, std::shared_ptr<deadline_state> const& d);
    void unwatch();
    void arm_deadline_timer();

    // A detached call's keys and arguments, owned: a repeat is sent after the caller's are gone.
    struct owned_call;
    // What the server answered to `attempt` (its call's answer at `answer_at`; the load's, when
    // it loaded, at 0), judged (judge_call) and acted on: a fall-back is the connection's from
    // now on, and an EVALSHA refused after Functions were says both.
    call_verdict::kind_type after(redis::response& resp, std::size_t answer_at,
                                  call_attempt const& attempt);
    // By SHA from now on, because the server answered `refusal`; logged once.
    void fall_back(std::string_view refusal);
    // The call as `attempt` sends it.
    void push_call(resp3::request& req, script const& code, std::size_t key_count,
                   std::span<std::string_view const> words, call_attempt const& attempt) const;
    // Sends `call` (with WAIT `wait` behind it when given) until its answer stands, as run()
    // describes; the last request's answers.
    boost::asio::awaitable<std::pair<boost::system::error_code, redis::response>>
    exchange(script_call const& call,
             std::optional<std::pair<std::size_t, std::chrono::milliseconds>> wait,
             std::optional<boost::asio::cancellation_slot> const& cancel_by,
             std::function<bool()> const& wanted);
    void send_detached(std::shared_ptr<owned_call> call, call_attempt attempt,
                       std::function<void(script_reply)> done);

    redis::detail::shared_engine const engine_;
    script_set const& scripts_;
    boost::asio::strand<boost::asio::any_io_executor> const strand_;
    std::atomic<call_form> form_;
    std::atomic<bool> fell_back_{false};
    std::shared_ptr<listener> listener_;
    // On the strand: the deadlines of run_retrying, in order, under one timer (no timer per
    // release on the hot path). Disarmed when none is left, so that it keeps no io_context
    // running.
    std::deque<watched_deadline> deadlines_;
    std::optional<lock_timer> deadline_timer_;
    bool deadline_timer_armed_ = false;
};

} // namespace colock::detail
