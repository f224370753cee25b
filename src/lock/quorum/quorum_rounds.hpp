// The rounds over a quorum's primaries that keep a lease, end it, and listen for wake-ups:
// extend, release, subscribe. Each round's answers and what they amount to are sans I/O
// (tested in test/unit/test_quorum_rounds.cpp); run_extend, run_release and run_subscribe ask
// the primaries around them. Private to the library's sources.
#pragma once

#include "lock/quorum/quorum_round.hpp"
#include "lock/store/lease_store.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/strand.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace colock::detail::redlock {

class quorum_leases;
class quorum_members;

// How long a release waits for the last primaries once a majority answered.
inline constexpr std::chrono::milliseconds release_round_wait{1000};
// How long a release that a majority gave back still waits for the other primaries asked (not
// down): long enough for a primary that is up to answer, even a loaded one (its release is a
// round trip of a millisecond or so), short enough that a stalled or vanished one costs
// release() little. Its release goes on in the background after that.
inline constexpr std::chrono::milliseconds release_straggler_wait{250};

// An extension's round: the confirmations that count, the primaries that said "not ours", and
// each other primary's error.
class extend_round final : public round_state {
public:
    // `set_keys`: a lock set's names, each primary asked with extend_names; keys is then the
    // first's, which the lease is tracked under.
    extend_round(boost::asio::strand<boost::asio::any_io_executor> const& strand, std::size_t n,
                 lock_keys keys, std::string token, std::chrono::milliseconds ttl,
                 std::int64_t fence, std::vector<lock_keys> set_keys = {});

    // What each primary is asked.
    lock_keys const& keys() const noexcept { return keys_; }
    std::string const& token() const noexcept { return token_; }
    std::chrono::milliseconds ttl() const noexcept { return ttl_; }
    std::int64_t fence() const noexcept { return fence_; }
    std::vector<lock_keys> const& set_keys() const noexcept { return set_keys_; }

    // Primary i is reconnecting: not asked, it counts as failed.
    void answer_down(std::size_t i);
    // Primary i's reply, and whether its confirmation counts for the lease (quorum_leases::
    // confirm); the round decided when the answers allow. Ignored once the round closed.
    void answer(std::size_t i, lease_reply const& r, bool counts);
    // Decided, timed out: later answers change nothing.
    void close() noexcept { closed_ = true; }

    // What the answers amount to, once closed, for an extension that took `elapsed`; the
    // primaries are named by `endpoints`.
    lease_reply outcome(std::chrono::milliseconds elapsed,
                        std::span<std::string const> endpoints) const;

private:
    lock_keys const keys_;
    std::string const token_;
    std::chrono::milliseconds const ttl_;
    std::int64_t const fence_;
    std::vector<lock_keys> const set_keys_;
    std::size_t confirmed_ = 0;
    std::size_t not_ours_ = 0;
    std::vector<primary_error> errors_; // per primary, when it failed
    bool closed_ = false;
};

// A release's round: how many primaries gave the lease back, said it was not ours, handed it
// on, or failed.
// A lock set's release on each primary (lease_store::release_names) rather than one lock's.
struct names_release {
    std::vector<lock_keys> keys;
    std::string entry;
    bool leave = false;
    std::vector<std::int64_t> last_fences; // as lease_store::release_names's
};

class release_round final : public round_state {
public:
    release_round(boost::asio::strand<boost::asio::any_io_executor> const& strand, std::size_t n,
                  lock_keys keys, std::string token, std::chrono::milliseconds claim,
                  std::int64_t last_fence, std::optional<names_release> names = std::nullopt);

    // What each primary is asked.
    lock_keys const& keys() const noexcept { return keys_; }
    std::string const& token() const noexcept { return token_; }
    std::chrono::milliseconds claim() const noexcept { return claim_; }
    std::int64_t last_fence() const noexcept { return last_fence_; }
    std::optional<names_release> const& names() const noexcept { return names_; }

    // Primary i is reconnecting: its release is sent, but not waited for.
    void answer_down(std::size_t i);
    // Primary i's reply; the round decided when all answered or a majority gave the lease back.
    void answer(std::size_t i, lease_reply const& r);
    // Whether a majority answered (ours or not).
    bool majority_answered() const noexcept;

    // Waits until the release may complete (release() returns): when every primary asked (not
    // down) answered; release_straggler_wait after a majority gave the lease back; or, with
    // neither, release_round_wait after the start once a majority answered, and otherwise
    // however long it takes either (each primary's release ends by its deadline). Not
    // cancellable.
    boost::asio::awaitable<void> wait_complete();

    // What the answers amount to; the primaries are named by `endpoints`.
    lease_reply outcome(std::span<std::string const> endpoints) const;

private:
    lock_keys const keys_;
    std::string const token_;
    std::chrono::milliseconds const claim_;
    std::int64_t const last_fence_;
    std::optional<names_release> const names_;
    std::size_t ours_ = 0;
    std::size_t not_ours_ = 0;
    std::size_t handed_ = 0;
    std::vector<primary_error> errors_;
};

// A subscription's round: a wake-up from any primary is enough.
class subscribe_round final : public round_state {
public:
    using round_state::round_state;

    // Primary i's answer; the round decided when a majority listens or all answered.
    void answer(std::size_t i, boost::system::error_code ec, std::string const& text);
    // Success when any primary listens; else the first failure.
    std::pair<boost::system::error_code, std::string> outcome() const;

private:
    std::size_t ok_ = 0;
    boost::system::error_code first_ec_;
    std::string first_text_;
};

// Extends the lease of `token` on every member in parallel (see lease_store::extend); decided
// by a majority of confirmations that count in `leases`, within the lease's validity.
// Cancelled by the awaiting coroutine's cancellation.
// Cancelled by the awaiting coroutine's cancellation. A lock set's: every name of `set_keys`.
boost::asio::awaitable<lease_reply> run_extend(std::shared_ptr<quorum_members const> members,
                                               std::shared_ptr<quorum_leases> leases,
                                               lock_keys const& keys, std::string const& token,
                                               std::chrono::milliseconds ttl, std::int64_t fence,
                                               std::vector<lock_keys> set_keys = {});

// Releases the lease of `token` on every member in parallel (see lease_store::release, and
// release_names for a lock set's `names`).
boost::asio::awaitable<lease_reply> run_release(std::shared_ptr<quorum_members const> members,
                                                lock_keys const& keys, std::string const& token,
                                                std::chrono::milliseconds claim,
                                                std::int64_t last_fence,
                                                std::optional<names_release> names = std::nullopt);

// Subscribes to `channel` on every member in parallel (see lease_store::subscribe).
boost::asio::awaitable<std::pair<boost::system::error_code, std::string>>
run_subscribe(std::shared_ptr<quorum_members const> members, std::string const& channel);

} // namespace colock::detail::redlock
