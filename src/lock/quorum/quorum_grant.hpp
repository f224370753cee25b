// One acquisition over a quorum's primaries (Redlock): each primary asked in parallel, its
// answer kept as it comes, and the decision on them (quorum::decide_grant) with what it leaves
// to do: the lease to count, the grants to give back, the wait or the error to report. The
// round's answers and its decision are sans I/O (tested in test/unit/test_quorum_grant.cpp);
// run_grant does the I/O around them. Private to the library's sources.
#pragma once

#include "lock/quorum/quorum_round.hpp"
#include "lock/store/lease_store.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/strand.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace colock::detail::redlock {

class quorum_leases;
class quorum_members;

// A lock set's attempt (lease_store::grant_names on each primary) rather than one lock's: the
// round's keys() are then the set's first name's, which the lease is tracked under.
struct names_attempt {
    std::vector<lock_keys> keys;
    names_request request;
};

// What an acquisition's answers amount to, and what they leave to do.
struct grant_outcome {
    grant_result result;
    // A lock set's, granted: each name's fence, the largest of the granting primaries'.
    std::vector<std::int64_t> fences;
    // Granted: each primary's count of server changes when it granted the lease, none where it
    // did not (for quorum_leases::record). Empty when not granted.
    std::vector<std::optional<std::uint64_t>> counted;
    // Not granted: the primaries whose grant, or attempt of unknown outcome, goes back.
    std::vector<std::size_t> give_back;
};

// An acquisition's round: each primary's answer as it comes.
class grant_round final : public round_state {
public:
    grant_round(boost::asio::strand<boost::asio::any_io_executor> const& strand, std::size_t n,
                lock_keys keys, std::string token, std::chrono::milliseconds ttl, queueing queue,
                replica_wait replicas, std::optional<names_attempt> names = std::nullopt);

    // What each primary is asked.
    lock_keys const& keys() const noexcept { return keys_; }
    std::string const& token() const noexcept { return token_; }
    std::chrono::milliseconds ttl() const noexcept { return ttl_; }
    queueing queue() const noexcept { return queue_; }
    replica_wait replicas() const noexcept { return replicas_; }
    // A lock set's attempt, or none.
    std::optional<names_attempt> const& names() const noexcept { return names_; }

    // Primary i's count of server changes for the keys when the round began.
    void set_changes_at_start(std::size_t i, std::uint64_t changes) {
        changes_at_start_[i] = changes;
    }
    // Where primary i's request hears the caller's stop.
    boost::asio::cancellation_slot stop_slot(std::size_t i) { return stops_[i].slot(); }
    // The caller's stop: emitted to every primary's request (honoured while it is unsent).
    void stop();

    // Whether primary i is still to be asked: not when the round was closed or stopped before
    // it was (its answer is then operation_aborted; nothing was sent).
    bool to_ask(std::size_t i);

    // What to do with the answer of a primary that came after the round closed.
    enum class straggler { ignore, join_lease, give_back };

    // Primary i's answer, with its count of server changes now (`changes_now`): recorded, and
    // the round decided when the answers allow. After the round closed, what to do with it
    // instead: a grant joins the lease when one was made, else it goes back, as does an answer
    // of unknown outcome.
    // A lock set's primary gives its names' fences with its grant.
    straggler answer(std::size_t i, grant_result r, std::uint64_t changes_now,
                     std::vector<std::int64_t> fences = {});

    // Decided or timed out: the caller is answered, later answers are stragglers.
    void close() noexcept { closed_ = true; }

    // A newer round for the same key and token began: this one's grants no longer go back.
    void supersede() noexcept { superseded_ = true; }
    bool superseded() const noexcept { return superseded_; }

    // What the answers amount to, once closed, for an attempt that took `elapsed`; the
    // primaries are named by `endpoints`, and `rng` draws the pause after a split vote.
    grant_outcome outcome(std::chrono::milliseconds elapsed, std::span<std::string const> endpoints,
                          std::minstd_rand& rng);

private:
    // Decides the round when the answers so far settle what it reports (grant_round_decided).
    void decide_if_settled();

    // Why a round had no majority (see summarise), a primary that did not answer named with
    // the round's timeout.
    primary_error grant_error(std::span<std::string const> endpoints) const;

    lock_keys const keys_;
    std::string const token_;
    std::chrono::milliseconds const ttl_;
    queueing const queue_;
    replica_wait const replicas_;
    std::optional<names_attempt> const names_;
    std::vector<boost::asio::cancellation_signal> stops_;
    std::vector<grant_result> results_;
    std::vector<std::vector<std::int64_t>> fences_; // a lock set's, per primary
    std::vector<std::uint64_t> changes_at_start_;
    std::size_t granted_ = 0;
    std::size_t held_ = 0;    // answered that another holds it
    bool stopped_ = false;    // the caller's stop was emitted
    bool closed_ = false;     // decided and reported: late answers are handled on their own
    bool lease_made_ = false; // decided with a lease: late grants join it
    bool superseded_ = false; // a newer round for the same key and token began
};

// Asks every member for the lease of `round` in parallel, and decides as soon as the answers
// allow, or when the round's timeout leaves the rest unknown; `stop` stops the requests not
// sent yet. A lease made is counted in `leases`. Stragglers finish in the background: a late
// grant is kept (it is ours, renewed and released with the rest) or given back. A lock set's
// round answers each name's fence too (names_grant::fences, empty for one lock's).
boost::asio::awaitable<names_grant> run_grant(std::shared_ptr<quorum_members const> members,
                                              std::shared_ptr<quorum_leases> leases,
                                              std::shared_ptr<grant_round> round,
                                              boost::asio::cancellation_slot stop,
                                              std::minstd_rand& rng);

} // namespace colock::detail::redlock
