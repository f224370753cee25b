// An election's requests: the proclaim (the campaign's claim of its term, and every new value)
// and the read, on one server or on every primary of a quorum, decided by majority there.
#include "lock/election/election_core.hpp"

#include "lock/base/errors.hpp"
#include "lock/core/holder_record.hpp"
#include "lock/core/locker_context.hpp"
#include "lock/quorum/quorum.hpp"
#include "lock/quorum/quorum_round.hpp"
#include "lock/store/election_scripts.hpp"
#include "lock/store/lock_replies.hpp"

#include <colock/error.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <array>
#include <functional>
#include <limits>

namespace colock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using boost::system::system_error;
using std::chrono::milliseconds;

namespace {

// How long a read of a quorum waits for the primaries that have not answered.
constexpr milliseconds quorum_read_timeout{2000};
// Sent again over passing errors, pausing 20 ms, doubled up to 250 ms.
constexpr milliseconds first_retry_pause{20};
constexpr milliseconds max_retry_pause{250};

std::vector<std::shared_ptr<script_client>> clients_of(locker_context const& l,
                                                       std::string const& name) {
    auto clients = l.store().script_clients();
    if (clients.empty())
        throw system_error(error::invalid_argument,
                           fmt::format("colock: election '{}': the locker's store runs no "
                                       "scripts",
                                       name));
    return clients;
}

// One script on every primary of a quorum: each answer as it comes, until `enough` of them
// decide the round (or all answered).
class script_round final : public redlock::round_state {
public:
    using enough_fn = std::function<bool(std::vector<std::optional<script_reply>> const&)>;

    script_round(asio::strand<asio::any_io_executor> const& strand, std::size_t n, enough_fn enough)
        : round_state(strand, n), replies(n), enough_(std::move(enough)) {}

    void answer(std::size_t i, script_reply r) {
        replies[i] = std::move(r);
        mark_answered(i);
        if (!decided() && (pending() == 0 || enough_(replies)))
            decide();
    }

    std::vector<std::optional<script_reply>> replies;

private:
    enough_fn const enough_;
};

// The proclaim on one primary; `words`: the keys, then the arguments. `retry`: sent again over
// passing errors as it says.
asio::awaitable<void> proclaim_on(std::shared_ptr<script_client> client,
                                  std::shared_ptr<script_round> round, std::size_t i,
                                  std::array<std::string, 7> words,
                                  std::optional<retry_schedule> retry) {
    script_call const call{client->scripts().proclaim,
                           {words[0], words[1]},
                           {words[2], words[3], words[4], words[5], words[6]}};
    // Not a conditional expression of two co_awaits: GCC 12 miscompiles that.
    script_reply reply;
    if (retry)
        reply = co_await client->run_retrying(call, send_as::sha, *retry);
    else
        reply = co_await client->run(call, send_as::sha, asio::cancellation_slot());
    round->answer(i, std::move(reply));
}

asio::awaitable<void> read_on(std::shared_ptr<script_client> client,
                              std::shared_ptr<script_round> round, std::size_t i,
                              std::array<std::string, 2> keys) {
    script_call const call{client->scripts().election_read, {keys[0], keys[1]}, {}};
    round->answer(i, co_await client->run(call, send_as::sha));
}

// The proclaim's answer: true (written), false (the lease is not ours), nothing for a reply of
// another shape.
std::optional<bool> proclaimed(script_reply const& reply) {
    auto const done = replies::flag(reply.value, 0, 1);
    if (!done)
        return std::nullopt;
    return *done == 1;
}

} // namespace

election_core::election_core(std::shared_ptr<locker_context> locker, std::string name)
    : locker_(std::move(locker))
    , clients_(clients_of(*locker_, name))
    , majority_(quorum::majority(clients_.size()))
    , name_(std::move(name))
    , space_{locker_->prefix() + "election:", true, "election"}
    , keys_(space_, name_, locker_->id()) {}

std::string election_core::failure_text(std::string_view what, error_code ec,
                                        std::string_view server_text) const {
    std::string why(server_text);
    if (why.empty() && is_connect_failure(ec))
        why = locker_->store().last_error_text();
    if (why.empty())
        why = ec.message();
    return fmt::format("colock: {} of election '{}': {}", what, name_,
                       with_acl_pointer(std::move(why), space_.kind));
}

asio::awaitable<bool> election_core::proclaim(lock_guard const& guard, std::string const& value,
                                              std::int64_t version, bool retrying) {
    auto const left = std::max(std::chrono::duration_cast<milliseconds>(
                                   guard.lease_expiry() - std::chrono::steady_clock::now()),
                               milliseconds{1});
    std::array<std::string, 7> const words{
        keys_.key, keys_.record_key, guard.token(),          std::to_string(guard.fence()),
        value,     locker_->id(),    std::to_string(version)};
    if (!quorum()) {
        script_call const call{clients_[0]->scripts().proclaim,
                               {words[0], words[1]},
                               {words[2], words[3], words[4], words[5], words[6]}};
        // The campaign's claim is sent again over passing errors while the lease is ours.
        script_reply reply;
        if (retrying)
            reply = co_await clients_[0]->run_retrying(
                call, send_as::sha,
                retry_schedule{std::numeric_limits<int>::max(), first_retry_pause, max_retry_pause,
                               left},
                [&guard] { return guard.owns_lock(); });
        else
            reply = co_await clients_[0]->run(call, send_as::sha);
        if (reply.ec)
            throw system_error(reply.ec, failure_text("proclaim", reply.ec, reply.server_text()));
        auto const done = proclaimed(reply);
        if (!done)
            throw system_error(error::unexpected_reply,
                               failure_text("proclaim", error::unexpected_reply,
                                            resp3::to_debug_string(reply.value)));
        co_return *done;
    }
    // A quorum: written on a majority, or refused by so many that no majority can write it.
    auto const n = clients_.size();
    auto const counts = [](std::vector<std::optional<script_reply>> const& replies) {
        std::pair<std::size_t, std::size_t> yes_no{0, 0};
        for (auto const& r : replies)
            if (r && !r->ec)
                if (auto const done = proclaimed(*r))
                    ++(*done ? yes_no.first : yes_no.second);
        return yes_no;
    };
    auto const majority = majority_;
    auto round = std::make_shared<script_round>(locker_->strand(), n,
                                                [counts, majority, n](auto const& replies) {
                                                    auto const [yes, no] = counts(replies);
                                                    return yes >= majority || no > n - majority;
                                                });
    std::optional<retry_schedule> retry;
    if (retrying)
        retry = retry_schedule{std::numeric_limits<int>::max(), first_retry_pause, max_retry_pause,
                               left};
    for (std::size_t i = 0; i < n; ++i)
        asio::co_spawn(locker_->strand(), proclaim_on(clients_[i], round, i, words, retry),
                       asio::detached);
    co_await round->wait(left, false);
    auto const [yes, no] = counts(round->replies);
    if (yes >= majority)
        co_return true;
    if (no > n - majority)
        co_return false;
    std::string errors;
    for (std::size_t i = 0; i < n; ++i) {
        auto const& r = round->replies[i];
        auto const text =
            !r      ? std::string("no answer in time")
            : r->ec ? (r->server_text().empty() ? r->ec.message() : std::string(r->server_text()))
                    : std::string();
        if (!text.empty())
            errors += fmt::format("{}primary {}: {}", errors.empty() ? "" : "; ", i + 1, text);
    }
    throw system_error(error::no_quorum,
                       failure_text("proclaim", error::no_quorum,
                                    fmt::format("{} of {} primaries took it, {} needed ({})", yes,
                                                n, majority, errors)));
}

asio::awaitable<election_reading> election_core::read() {
    if (!quorum()) {
        script_call const call{
            clients_[0]->scripts().election_read, {keys_.key, keys_.record_key}, {}};
        co_return read_election(co_await clients_[0]->run(call, send_as::sha));
    }
    auto const majority = majority_;
    auto const readings = [](std::vector<std::optional<script_reply>> const& replies) {
        std::vector<election_reading> out;
        for (auto const& r : replies) {
            if (r) {
                out.push_back(read_election(*r));
            } else {
                election_reading silent;
                silent.ec = error::timeout;
                out.push_back(std::move(silent));
            }
        }
        return out;
    };
    auto round = std::make_shared<script_round>(
        locker_->strand(), clients_.size(), [readings, majority](auto const& replies) {
            return !decide_reading(readings(replies), majority).ec;
        });
    for (std::size_t i = 0; i < clients_.size(); ++i)
        asio::co_spawn(locker_->strand(),
                       read_on(clients_[i], round, i, {keys_.key, keys_.record_key}),
                       asio::detached);
    co_await round->wait(quorum_read_timeout, false);
    co_return decide_reading(readings(round->replies), majority);
}

asio::awaitable<std::optional<leader_info>> election_core::leader() {
    auto const r = co_await read();
    if (r.ec)
        throw system_error(r.ec, failure_text("leader query", r.ec, r.server_text));
    if (!r.leading)
        co_return std::nullopt;
    leader_info info{r.value, r.term, r.owner, std::nullopt,
                     std::max(r.record_ttl, milliseconds{0})};
    auto const record =
        co_await locker_->store().read_record(locker_->locker_key_prefix() + r.owner);
    if (record.ec)
        throw system_error(record.ec, failure_text("leader query", record.ec, record.server_text));
    if (!record.fields.empty())
        info.holder = read_holder(record.fields);
    co_return info;
}

} // namespace colock::detail
