#include "lock/quorum/quorum_rounds.hpp"

#include "lock/quorum/quorum.hpp"
#include "lock/quorum/quorum_leases.hpp"
#include "lock/quorum/quorum_members.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <utility>

namespace colock::detail::redlock {

namespace asio = boost::asio;
using boost::system::error_code;
using std::chrono::milliseconds;

// ------------------------------------------------------------------ extend

extend_round::extend_round(asio::strand<asio::any_io_executor> const& strand, std::size_t n,
                           lock_keys keys, std::string token, milliseconds ttl, std::int64_t fence,
                           std::vector<lock_keys> set_keys)
    : round_state(strand, n)
    , keys_(std::move(keys))
    , token_(std::move(token))
    , ttl_(ttl)
    , fence_(fence)
    , set_keys_(std::move(set_keys))
    , errors_(n) {}

void extend_round::answer_down(std::size_t i) {
    mark_answered(i);
    errors_[i] = {redis::error::connection_lost, "not connected (reconnecting)"};
    if (quorum::extend_round_decided(confirmed_, not_ours_, pending(), size()))
        decide();
}

void extend_round::answer(std::size_t i, lease_reply const& r, bool counts) {
    if (closed_)
        return;
    mark_answered(i);
    if (r.ec)
        errors_[i] = {r.ec, std::string()};
    else if (counts)
        ++confirmed_;
    else
        ++not_ours_;
    if (quorum::extend_round_decided(confirmed_, not_ours_, pending(), size()))
        decide();
}

lease_reply extend_round::outcome(milliseconds elapsed,
                                  std::span<std::string const> endpoints) const {
    auto const n = size();
    if (quorum::extension_holds(confirmed_, n, ttl_, elapsed))
        return lease_reply{error_code{}, true};
    // Definitely lost when the primaries that said "not ours" leave no majority possible.
    if (not_ours_ > n - quorum::majority(n))
        return lease_reply{error_code{}, false};
    if (confirmed_ >= quorum::majority(n)) // confirmed, but too late to count on it
        return lease_reply{error::no_quorum, false};
    return lease_reply{summarise(with_silence(errors_), endpoints).first, false};
}

namespace {

asio::awaitable<void> extend_member(std::shared_ptr<quorum_members const> members,
                                    std::shared_ptr<quorum_leases> leases,
                                    std::shared_ptr<extend_round> round, std::size_t i) {
    if (members->is_down(i)) {
        round->answer_down(i);
        co_return;
    }
    auto& store = members->store(i);
    auto const before = store.server_changes(round->keys());
    lease_reply r;
    if (round->set_keys().empty())
        r = co_await store.extend(round->keys(), round->token(), round->ttl(), round->fence(),
                                  std::nullopt);
    else
        r = co_await store.extend_names(round->set_keys(), round->token(), round->ttl());
    auto const after = store.server_changes(round->keys());
    // A confirmation counts from an instance that granted or confirmed this lease before,
    // and was not replaced meanwhile; a late one still keeps the primary counted.
    bool const counts = !r.ec && r.ours && before == after &&
                        leases->confirm(round->keys().key, round->token(), i, after);
    round->answer(i, r, counts);
}

} // namespace

asio::awaitable<lease_reply> run_extend(std::shared_ptr<quorum_members const> members,
                                        std::shared_ptr<quorum_leases> leases,
                                        lock_keys const& keys, std::string const& token,
                                        milliseconds ttl, std::int64_t fence,
                                        std::vector<lock_keys> set_keys) {
    auto const n = members->size();
    auto round = std::make_shared<extend_round>(members->strand(), n, keys, token, ttl, fence,
                                                std::move(set_keys));
    auto const started = clock_type::now();
    for (std::size_t i = 0; i < n; ++i)
        asio::co_spawn(members->strand(), extend_member(members, leases, round, i), asio::detached);
    if (!co_await round->wait(quorum::attempt_timeout(ttl), true))
        co_return lease_reply{asio::error::operation_aborted, false};
    round->close();
    auto const elapsed = std::chrono::duration_cast<milliseconds>(clock_type::now() - started);
    co_return round->outcome(elapsed, members->endpoints());
}

// ------------------------------------------------------------------ release

release_round::release_round(asio::strand<asio::any_io_executor> const& strand, std::size_t n,
                             lock_keys keys, std::string token, milliseconds claim,
                             std::int64_t last_fence, std::optional<names_release> names)
    : round_state(strand, n)
    , keys_(std::move(keys))
    , token_(std::move(token))
    , claim_(claim)
    , last_fence_(last_fence)
    , names_(std::move(names))
    , errors_(n) {}

void release_round::answer_down(std::size_t i) {
    mark_answered(i);
    errors_[i] = {redis::error::connection_lost, "not connected (reconnecting)"};
    if (pending() == 0)
        decide();
}

void release_round::answer(std::size_t i, lease_reply const& r) {
    mark_answered(i);
    if (r.ec)
        errors_[i] = {r.ec, std::string()};
    else if (r.ours)
        ++ours_;
    else
        ++not_ours_;
    handed_ += !r.ec && r.handed ? 1 : 0;
    if (pending() == 0 || ours_ >= quorum::majority(size()))
        decide();
}

bool release_round::majority_answered() const noexcept {
    return ours_ + not_ours_ >= quorum::majority(size());
}

asio::awaitable<void> release_round::wait_complete() {
    co_await wait(release_round_wait, false);
    if (!decided() && !majority_answered())
        co_await wait_decided();
    // Decided by a majority that gave the lease back: the others asked are waited for briefly,
    // so that a lock released leaves nothing behind on a primary that is up.
    if (decided())
        co_await wait_answered(release_straggler_wait);
}

lease_reply release_round::outcome(std::span<std::string const> endpoints) const {
    // Ours unless a majority said it was not (then the lease had been lost meanwhile); a
    // primary that never granted it says "not ours" too.
    auto const majority = quorum::majority(size());
    lease_reply r;
    r.ours = ours_ > 0 && not_ours_ < majority;
    r.handed = handed_ >= majority;
    if (ours_ + not_ours_ < majority) {
        r.ours = false;
        r.ec = summarise(with_silence(errors_), endpoints).first;
    }
    return r;
}

namespace {

asio::awaitable<void> release_member(std::shared_ptr<quorum_members const> members,
                                     std::shared_ptr<release_round> round, std::size_t i) {
    // Sent to a primary that is down too (it may hold our token when it is back), but not
    // waited for.
    bool const down = members->is_down(i);
    if (down)
        round->answer_down(i);
    lease_reply r;
    if (auto const& names = round->names())
        r = co_await members->store(i).release_names(names->keys, names->entry, round->token(),
                                                     names->leave, names->last_fences);
    else
        r = co_await members->store(i).release(round->keys(), round->token(), round->claim(),
                                               round->last_fence(), std::nullopt);
    if (down)
        co_return;
    round->answer(i, r);
}

} // namespace

asio::awaitable<lease_reply> run_release(std::shared_ptr<quorum_members const> members,
                                         lock_keys const& keys, std::string const& token,
                                         milliseconds claim, std::int64_t last_fence,
                                         std::optional<names_release> names) {
    auto const n = members->size();
    auto round = std::make_shared<release_round>(members->strand(), n, keys, token, claim,
                                                 last_fence, std::move(names));
    for (std::size_t i = 0; i < n; ++i)
        asio::co_spawn(members->strand(), release_member(members, round, i), asio::detached);
    // Each primary's release retries until release_timeout by itself, in the background once
    // the round completed (wait_complete: every primary asked answered, or a majority did and a
    // short wait passed), so that a primary that stalls or died does not hold up release().
    co_await round->wait_complete();
    co_return round->outcome(members->endpoints());
}

// ------------------------------------------------------------------ subscribe

void subscribe_round::answer(std::size_t i, error_code ec, std::string const& text) {
    mark_answered(i);
    if (!ec) {
        ++ok_;
    } else if (!first_ec_) {
        first_ec_ = ec;
        first_text_ = text;
    }
    if (pending() == 0 || ok_ >= quorum::majority(size()))
        decide();
}

std::pair<error_code, std::string> subscribe_round::outcome() const {
    if (ok_ > 0)
        return {};
    return {first_ec_, first_text_};
}

namespace {

asio::awaitable<void> subscribe_member(std::shared_ptr<quorum_members const> members,
                                       std::shared_ptr<subscribe_round> round, std::size_t i,
                                       std::string channel) {
    auto const [ec, text] = co_await members->store(i).subscribe(channel);
    round->answer(i, ec, text);
}

} // namespace

asio::awaitable<std::pair<error_code, std::string>>
run_subscribe(std::shared_ptr<quorum_members const> members, std::string const& channel) {
    auto const n = members->size();
    auto round = std::make_shared<subscribe_round>(members->strand(), n);
    for (std::size_t i = 0; i < n; ++i)
        asio::co_spawn(members->strand(), subscribe_member(members, round, i, channel),
                       asio::detached);
    // A wake-up from any primary is enough: done when a majority listens or all answered.
    co_await round->wait_decided();
    co_return round->outcome();
}

} // namespace colock::detail::redlock
