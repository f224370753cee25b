/// @file
/// Leader election on a locker: candidates queue FIFO across processes, one leads at a time,
/// and its term is a fence.
#pragma once

#include <colock/lock_options.hpp>
#include <colock/lock_status.hpp>
#include <colock/locker.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/deferred.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace colock {

namespace detail {
class election_core;
class watch_state;
} // namespace detail

/// Who leads an election now, as election::co_leader() reads it.
struct leader_info {
    /// What the leader proclaimed (co_campaign's value, or co_proclaim's since).
    std::string value;
    /// The leader's term: its lease's fence, strictly increasing per election.
    std::int64_t term = 0;
    /// The leader's locker (its id in the server's keys).
    std::string holder_id;
    /// The leader's process (host, pid, program, ...), when its locker's record was found.
    std::optional<holder_info> holder;
    /// How long the leader's lease has left on the server, unless it is renewed (with Redlock,
    /// the least of the majority's).
    std::chrono::milliseconds ttl{0};
};

/// One change an election's leader_watch reports.
struct leader_change {
    /// True: `value` and `term` are the leader's now (a new leader, or a new value of the
    /// same term). False: nobody leads (the lease lapsed, or the leader resigned with nobody
    /// queued); `term` is the term that ended, when known (else 0), and `value` is empty. A
    /// leader may proclaim an empty value, so an empty value alone does not mean "no leader".
    bool leading = false;
    /// The leader's value.
    std::string value;
    /// The leader's term (or the term that ended).
    std::int64_t term = 0;
    /// The watch read the election again after it may have missed messages (a reconnection,
    /// a message that did not come): this is the state now, and changes between the previous
    /// event and this one may be missing. False: nothing between was missed.
    bool resynced = false;
};

/// This process's leadership of an election, from co_campaign until it resigns, is lost or
/// is destroyed. It holds the leadership's lease through a lock_guard, renewed in the
/// background as a lock's: see lock_guard for the thread rules and the loss. Destroying it
/// (or moving from it) resigns in the background, as a guard's destruction releases.
class leadership {
public:
    /// Leads nothing.
    leadership() noexcept;
    /// Takes over `other`'s leadership; `other` then leads nothing.
    leadership(leadership&& other) noexcept;
    /// Resigns what this leads, in the background, then takes over `other`'s.
    leadership& operator=(leadership&& other) noexcept;
    /// Resigns in the background, if it still leads: the next candidate leads at once.
    ~leadership();

    /// The election's name.
    std::string const& name() const noexcept;
    /// The term: the lease's fence, strictly increasing per election over every leader (across
    /// failovers, as a lock's fence). Pass it to the resources the leader writes to, so they
    /// can refuse a late write from an earlier leader.
    std::int64_t term() const noexcept;
    /// What this leader proclaimed last.
    std::string const& value() const noexcept;
    /// The term(), by the name every holding of the family gives its fence.
    std::int64_t fence() const noexcept { return term(); }
    /// The lease's token at the server.
    std::string const& token() const noexcept { return guard_.token(); }
    /// Whether it leads now (the lease is held and its local deadline has not passed); from
    /// any thread.
    bool owns() const noexcept { return guard_.owns(); }
    /// owns().
    explicit operator bool() const noexcept { return owns(); }
    /// The leadership's lease was lost (see lock_guard::lost).
    bool lost() const noexcept { return guard_.lost(); }
    /// Why it was lost, once it was.
    std::optional<loss_reason> loss() const noexcept { return guard_.loss(); }
    /// The lease's local bound, as lock_guard::lease_expiry().
    std::chrono::steady_clock::time_point lease_expiry() const noexcept {
        return guard_.lease_expiry();
    }
    /// The lease's guard, which the operations above go through.
    lock_guard& guard() noexcept { return guard_; }
    /// The lease's guard.
    lock_guard const& guard() const noexcept { return guard_; }

    /// Completes when the leadership is lost (or let go), as lock_guard::async_wait_lost.
    /// @par Completion signature
    /// `void(boost::system::error_code)`: success when lost; error::not_held when it no longer
    /// leads for another reason.
    /// @par Per-operation cancellation
    /// terminal, partial, total: the wait ends with operation_aborted; nothing else changes.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_wait_lost(CompletionToken&& token = {}) {
        return guard_.async_wait_lost(std::forward<CompletionToken>(token));
    }
    /// Returns when the leadership is lost (or let go): lock_guard::wait_lost(). Meant for
    /// `co_await (lead() || leadership.wait_lost())`.
    boost::asio::awaitable<void> wait_lost();
    /// Sets the leadership's lease to `ttl` from now, as lock_guard::extend.
    boost::asio::awaitable<bool> extend(std::chrono::milliseconds ttl) {
        return guard_.extend(ttl);
    }
    /// extend() for any completion token, as lock_guard::async_extend.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_extend(std::chrono::milliseconds ttl, CompletionToken&& token = {}) {
        return guard_.async_extend(ttl, std::forward<CompletionToken>(token));
    }
    /// Publishes a new value for the same term: co_leader() and every watch see it.
    /// Throws boost::system::system_error: error::lock_lost when the term is over (the lease
    /// was lost or let go), a network error or redis::error::server_error otherwise, each
    /// naming the election.
    /// @par Per-operation cancellation
    /// As the connection's async_exec: honoured while the request is unsent; a cancelled
    /// proclaim may still have been applied.
    boost::asio::awaitable<void> co_proclaim(std::string value);
    /// The same as an operation of any completion token. The leadership must outlive it (as a
    /// socket its reads), and value() says the new value once it has completed without error.
    /// @par Completion signature
    /// `void(boost::system::error_code)`: error::lock_lost when the term is over, error::not_held
    /// for a leadership that leads nothing, a network error or redis::error::server_error.
    /// @par Per-operation cancellation
    /// As co_proclaim.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_proclaim(std::string value, CompletionToken&& token = {}) {
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code)>(
            [this](auto handler, std::string v) {
                start_proclaim(std::move(v), std::move(handler));
            },
            token, std::move(value));
    }
    /// Gives the leadership up (resigns): the first queued candidate (of any process) leads at
    /// once; with nobody queued, every watch is told that nobody leads. Returns what
    /// lock_guard::release() returns: true when it still led and gave the leadership up.
    /// @par Per-operation cancellation
    /// As lock_guard::release().
    boost::asio::awaitable<bool> release();
    /// The same as an operation of any completion token: lock_guard::async_release of the
    /// leadership's guard, which carries the lease (the leadership may go away at once).
    /// @par Completion signature
    /// `void(boost::system::error_code, bool resigned)`, as lock_guard::async_release.
    /// @par Per-operation cancellation
    /// None, as lock_guard::async_release.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_release(CompletionToken&& token = {}) {
        return guard_.async_release(std::forward<CompletionToken>(token));
    }

private:
    friend class election;
    leadership(lock_guard guard, std::string name, std::string value,
               std::shared_ptr<detail::election_core> core) noexcept;
    void
    start_proclaim(std::string value,
                   boost::asio::any_completion_handler<void(boost::system::error_code)> handler);

    lock_guard guard_;
    std::string name_;
    std::string value_;
    std::int64_t version_ = 0; // of the value: 1 for the campaign's, one more per proclaim
    std::shared_ptr<detail::election_core> core_;
};

/// The changes of an election's leader, in order, from election::observe(). Every change is
/// reported: a new leader, a new value, nobody leading (on the server's clock: a lapsed lease is
/// seen when it lapses). When the watch may have missed messages (a reconnection), it reads the
/// election again and says so (leader_change::resynced) rather than going quiet.
///
/// @par Thread safety
/// As an Asio I/O object: one co_next() at a time; destroy it where it is used.
class leader_watch {
public:
    /// Watches nothing: co_next() returns an empty optional.
    leader_watch() noexcept;
    /// Takes over `other`'s watch.
    leader_watch(leader_watch&& other) noexcept;
    /// Closes this watch, then takes over `other`'s.
    leader_watch& operator=(leader_watch&& other) noexcept;
    /// Closes the watch: a co_next() under way ends with operation_aborted.
    ~leader_watch();

    /// The next change: the first call returns the state when the watch started (who leads,
    /// or nobody). An empty optional once the watch is closed, its locker is gone, or its
    /// connection was closed by its user. Throws boost::system::system_error when the
    /// subscription is refused (an ACL without the channel), naming the channel.
    /// @par Per-operation cancellation
    /// terminal, partial, total: returns at once (operation_aborted); no change is lost, the
    /// next call returns it.
    boost::asio::awaitable<std::optional<leader_change>> co_next();
    /// The same as an operation of any completion token.
    /// @par Completion signature
    /// `void(boost::system::error_code, std::optional<leader_change>)`: the code of the refused
    /// subscription; operation_aborted when cancelled or closed while it waited.
    /// @par Per-operation cancellation
    /// As co_next.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_next(CompletionToken&& token = {}) {
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code,
                                                                 std::optional<leader_change>)>(
            [st = state_](auto handler) { start_next(st, std::move(handler)); }, token);
    }
    /// Stops watching: the subscription ends, a co_next() under way ends with
    /// operation_aborted and later ones return an empty optional.
    void close();

private:
    friend class election;
    explicit leader_watch(std::shared_ptr<detail::watch_state> state) noexcept;
    static void start_next(std::shared_ptr<detail::watch_state> state,
                           boost::asio::any_completion_handler<void(boost::system::error_code,
                                                                    std::optional<leader_change>)>
                               handler);

    std::shared_ptr<detail::watch_state> state_;
};

/// A leader election named `name` among the processes that use the same locker prefix on the
/// same deployment. Candidates queue FIFO across processes (the lock's process queue), so a
/// resign or a release hands leadership to the next candidate at once; a leader that dies is
/// followed when its lease lapses (its ttl). The leadership is a lock's lease, granted by the
/// server for each term (never handed between candidates of one process without it, whatever
/// lock_options::cohort_limit says), so each term is a fence of the server's.
///
/// Its keys are `<prefix>election:{name}` (the leadership's lock) and
/// `<prefix>election:{name}:e` (the term's record, which lives and ends with the lease); its
/// channel is the record's name. A locker whose prefix is another's prefix + "election:" would
/// share them: do not use one.
///
/// Works on one server, a Sentinel-resolved primary and a Cluster (all keys in the slot of
/// `{name}`), and on a Redlock locker: a term is claimed, proclaimed and read on a majority of
/// the primaries, and a watch reports a change once a majority has told it.
///
/// @par Thread safety
/// Any member function may be called from any thread. The locker must outlive the election
/// and its watches; a leadership keeps what it needs alive itself, as a guard does.
class election {
public:
    /// The type of get_executor().
    using executor_type = boost::asio::any_io_executor;
    /// The locker's executor (its connection's): where operations complete unless the handler
    /// has an executor of its own, as for an Asio I/O object.
    executor_type get_executor() const noexcept;

    /// An election of `name` on `locker`. Throws boost::system::system_error
    /// (error::invalid_argument) for a name the lock would refuse (see colock::validate).
    election(locker& locker, std::string_view name);
    /// An election object can be dropped at any time: what it started lives on by itself.
    ~election();
    election(election const&) = delete;
    election& operator=(election const&) = delete;

    /// The election's name.
    std::string const& name() const noexcept;

    /// Waits to lead, then proclaims `value`: returns when this candidate leads and every
    /// watch has been told. `opt` as for locker::co_lock: the ttl of the leadership's lease
    /// (how long a dead leader holds the election up), its renewal, wait_timeout (then
    /// error::timeout), and so on; cohort_limit is ignored. Throws as locker::co_lock does,
    /// naming the election.
    /// @par Per-operation cancellation
    /// terminal, partial: as locker::co_lock; a term won meanwhile is resigned before the
    /// call ends with operation_aborted.
    boost::asio::awaitable<leadership> co_campaign(std::string value, lock_options opt = {});
    /// The same as an operation of any completion token; the election object may go away
    /// while it runs.
    /// @par Completion signature
    /// `void(boost::system::error_code, leadership)`: the codes co_campaign throws.
    /// @par Per-operation cancellation
    /// As co_campaign.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_campaign(std::string value, lock_options opt = {}, CompletionToken&& token = {}) {
        validate(name(), opt);
        return boost::asio::async_initiate<CompletionToken,
                                           void(boost::system::error_code, leadership)>(
            [core = core_](auto handler, std::string v, lock_options o) {
                start_campaign(core, std::move(v), std::move(o), std::move(handler));
            },
            token, std::move(value), std::move(opt));
    }
    /// async_campaign with the default options: the token where they would stand.
    template <not_lock_options CompletionToken>
    auto async_campaign(std::string value, CompletionToken&& token) {
        return async_campaign(std::move(value), lock_options{},
                              std::forward<CompletionToken>(token));
    }

    /// Who leads now, or an empty optional when nobody does (nobody campaigned, the leader
    /// resigned with nobody queued, its lease lapsed, or the next candidate has not yet taken
    /// over). One script, and a read of the leader's process record.
    /// Throws boost::system::system_error: a network error, redis::error::server_error,
    /// error::unexpected_reply for keys that do not read as an election's, or (Redlock)
    /// error::no_quorum when no majority of the primaries agrees.
    boost::asio::awaitable<std::optional<leader_info>> co_leader();
    /// The same as an operation of any completion token.
    /// @par Completion signature
    /// `void(boost::system::error_code, std::optional<leader_info>)`: the codes co_leader throws.
    /// @par Per-operation cancellation
    /// terminal, partial: as the connection's async_exec.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_leader(CompletionToken&& token = {}) {
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code,
                                                                 std::optional<leader_info>)>(
            [core = core_](auto handler) { start_leader(core, std::move(handler)); }, token);
    }

    /// A watch of this election's changes from now on; see leader_watch.
    leader_watch observe();

    /// Ends the term of whoever leads, from any process: the last resort for a leader that is
    /// stuck. The leader's locker is told at once (its leadership is lost with
    /// loss_reason::forced, wait_lost() completes, its renewal stops), every watch is told
    /// that nobody leads, and the first queued candidate leads once the lock's quarantine is
    /// over (up to a second, never longer than the lease had left; see
    /// locker::co_force_unlock). Returns true when someone led and was ended, false when
    /// nobody led. A leader whose connection is down learns it only at its next renewal.
    /// Throws boost::system::system_error naming the election: a network error,
    /// redis::error::server_error, or (Redlock) error::no_quorum.
    boost::asio::awaitable<bool> co_force_resign();
    /// The same as an operation of any completion token.
    /// @par Completion signature
    /// `void(boost::system::error_code, bool ended)`: the codes co_force_resign throws.
    /// @par Per-operation cancellation
    /// terminal, partial: as the connection's async_exec (the term may still have been ended).
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_force_resign(CompletionToken&& token = {}) {
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code, bool)>(
            [core = core_](auto handler) { start_force_resign(core, std::move(handler)); }, token);
    }

private:
    static boost::asio::awaitable<leadership> campaign(std::shared_ptr<detail::election_core> core,
                                                       std::string value, lock_options opt);
    static void start_campaign(
        std::shared_ptr<detail::election_core> core, std::string value, lock_options opt,
        boost::asio::any_completion_handler<void(boost::system::error_code, leadership)> handler);
    static void start_leader(std::shared_ptr<detail::election_core> core,
                             boost::asio::any_completion_handler<void(boost::system::error_code,
                                                                      std::optional<leader_info>)>
                                 handler);
    static void start_force_resign(
        std::shared_ptr<detail::election_core> core,
        boost::asio::any_completion_handler<void(boost::system::error_code, bool)> handler);

    std::shared_ptr<detail::election_core> core_;
};

} // namespace colock
