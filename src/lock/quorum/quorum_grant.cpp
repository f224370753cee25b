#include "lock/quorum/quorum_grant.hpp"

#include "lock/quorum/quorum.hpp"
#include "lock/quorum/quorum_leases.hpp"
#include "lock/quorum/quorum_members.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace colock::detail::redlock {

namespace asio = boost::asio;
using std::chrono::milliseconds;

grant_round::grant_round(asio::strand<asio::any_io_executor> const& strand, std::size_t n,
                         lock_keys keys, std::string token, milliseconds ttl, queueing queue,
                         replica_wait replicas, std::optional<names_attempt> names)
    : round_state(strand, n)
    , keys_(std::move(keys))
    , token_(std::move(token))
    , ttl_(ttl)
    , queue_(queue)
    , replicas_(replicas)
    , names_(std::move(names))
    , stops_(n)
    , results_(n)
    , fences_(n)
    , changes_at_start_(n) {}

void grant_round::stop() {
    stopped_ = true;
    for (auto& s : stops_)
        s.emit(asio::cancellation_type::total);
}

bool grant_round::to_ask(std::size_t i) {
    if (!closed_ && !stopped_)
        return true;
    // Decided (or stopped) before this primary was asked: nothing was sent.
    results_[i].ec = asio::error::operation_aborted;
    mark_answered(i);
    if (!closed_)
        decide_if_settled(); // a stop before any primary was asked ends the round now
    return false;
}

void grant_round::decide_if_settled() {
    // A stopped caller wants no more than whether it was granted.
    bool const settled = stopped_ ? quorum::round_decided(granted_, pending(), size())
                                  : quorum::grant_round_decided(granted_, held_, pending(), size());
    if (settled)
        decide();
}

grant_round::straggler grant_round::answer(std::size_t i, grant_result r, std::uint64_t changes_now,
                                           std::vector<std::int64_t> fences) {
    if (r.granted && changes_now != changes_at_start_[i]) {
        // Granted by an instance that has been replaced since: it does not count, and the
        // new one may hold our token (the request may have been repeated there).
        r.granted = false;
        r.ec = redis::error::connection_lost;
        r.outcome_unknown = true;
    }
    if (closed_) {
        // A straggler: joins the lease when it was made, else gives its grant back.
        if (r.granted && lease_made_)
            return straggler::join_lease;
        if (r.granted || r.outcome_unknown)
            return straggler::give_back;
        return straggler::ignore;
    }
    results_[i] = std::move(r);
    fences_[i] = std::move(fences);
    mark_answered(i);
    if (results_[i].granted)
        ++granted_;
    else if (!results_[i].ec)
        ++held_;
    decide_if_settled();
    return straggler::ignore;
}

grant_outcome grant_round::outcome(milliseconds elapsed, std::span<std::string const> endpoints,
                                   std::minstd_rand& rng) {
    auto const n = size();
    std::vector<quorum::grant_vote> votes(n);
    bool others_queued = false;
    for (std::size_t i = 0; i < n; ++i) {
        auto const& r = results_[i];
        auto& v = votes[i];
        if (!answered(i) || (r.ec && r.outcome_unknown))
            v.what = quorum::grant_vote::kind::unknown;
        else if (r.ec)
            v.what = quorum::grant_vote::kind::refused;
        else if (r.granted)
            v = {quorum::grant_vote::kind::granted, r.fence, milliseconds(0)};
        else
            v = {quorum::grant_vote::kind::held, 0, r.holder_ttl};
        others_queued = others_queued || (!r.ec && answered(i) && r.others_queued);
    }
    auto const d = quorum::decide_grant(votes, ttl_, elapsed);
    grant_outcome out;
    auto& result = out.result;
    if (d.granted) {
        lease_made_ = true;
        out.counted.resize(n);
        for (std::size_t i = 0; i < n; ++i)
            if (votes[i].what == quorum::grant_vote::kind::granted)
                out.counted[i] = changes_at_start_[i];
        result.granted = true;
        result.fence = d.fence;
        result.others_queued = others_queued;
        if (names_) {
            out.fences.assign(names_->keys.size(), 0);
            for (std::size_t i = 0; i < n; ++i)
                if (votes[i].what == quorum::grant_vote::kind::granted)
                    for (std::size_t k = 0; k < out.fences.size() && k < fences_[i].size(); ++k)
                        out.fences[k] = std::max(out.fences[k], fences_[i][k]);
        }
        return out;
    }
    // Not ours: give back every grant, and every attempt that may have been applied (its
    // release follows it on that primary's connection, so it runs after it). A release
    // hands the primary to the first process queued there, which helps a split converge.
    out.give_back = d.release;
    result.outcome_unknown = !d.release.empty();
    std::size_t held = 0;
    for (auto const& v : votes)
        held += v.what == quorum::grant_vote::kind::held ? 1 : 0;
    if (stopped_ && held < quorum::majority(n)) {
        result.ec = asio::error::operation_aborted;
        return out;
    }
    if (d.retry_after.count() > 0 || held >= quorum::majority(n)) {
        // Held elsewhere: no error; the wait is until a majority may lapse.
        result.holder_ttl = d.retry_after;
        result.others_queued = others_queued;
        return out;
    }
    if (held > 0 && held + granted_ >= quorum::majority(n) && granted_ < quorum::majority(n)) {
        // Split with other waiters (each got some primaries, none a majority): all give back
        // and ask again after a random pause, so that one of them comes first.
        auto const scale = std::max<std::int64_t>(2, 2 * elapsed.count());
        result.holder_ttl =
            milliseconds(std::uniform_int_distribution<std::int64_t>(1, scale)(rng));
        result.others_queued = others_queued;
        return out;
    }
    if (granted_ >= quorum::majority(n)) {
        // A majority granted, but the attempt took too long for the lease to be safe.
        result.ec = error::no_quorum;
        result.server_text = fmt::format(
            "a majority of the Redlock primaries granted the lock, but the attempt took {} ms "
            "of its {} ms ttl, which leaves no validity after {} ms of clock drift",
            elapsed.count(), ttl_.count(), quorum::clock_drift(ttl_).count());
        return out;
    }
    auto [ec, text] = grant_error(endpoints);
    result.ec = ec;
    result.server_text = std::move(text);
    return out;
}

primary_error grant_round::grant_error(std::span<std::string const> endpoints) const {
    std::vector<primary_error> errors(size());
    for (std::size_t i = 0; i < size(); ++i) {
        if (!answered(i))
            errors[i] = {error::no_quorum, fmt::format("no answer within {} ms",
                                                       quorum::attempt_timeout(ttl_).count())};
        else if (results_[i].ec)
            errors[i] = {results_[i].ec, results_[i].server_text};
    }
    return summarise(errors, endpoints);
}

namespace {

// Gives primary `i`'s grant of `round` back, free (not handed on: see release_source), in the
// background, unless a newer acquisition for the same key and token supersedes it (the lock
// layer asks again with the same token: a late give-back must not take back what the new round
// grants). Its request follows the round's own on that primary's connection.
void give_back(quorum_members const& members, std::size_t i,
               std::shared_ptr<grant_round> const& round) {
    if (auto const& names = round->names()) {
        // On the strand, so the check and the send are one step.
        if (!round->superseded())
            members.store(i).release_names_in_background(names->keys, names->request.entry,
                                                         round->token(), false, {}, [] {});
        return;
    }
    members.store(i).give_back_in_background(round->keys(), round->token(),
                                             [round] { return !round->superseded(); });
}

asio::awaitable<void> ask_member(std::shared_ptr<quorum_members const> members,
                                 std::shared_ptr<quorum_leases> leases,
                                 std::shared_ptr<grant_round> round, std::size_t i) {
    if (!round->to_ask(i))
        co_return;
    auto& store = members->store(i);
    if (members->is_down(i)) {
        // Reconnecting: a request would wait in its queue and might run long after this
        // round; nothing is sent, so the round can decide on the others' answers now.
        grant_result r;
        r.ec = redis::error::connection_lost;
        r.server_text = "not connected (reconnecting)";
        round->answer(i, std::move(r), 0);
        co_return;
    }
    grant_result r;
    std::vector<std::int64_t> fences;
    if (auto const& names = round->names()) {
        auto g = co_await store.grant_names(names->keys, names->request, round->stop_slot(i));
        r = std::move(g.result);
        fences = std::move(g.fences);
    } else {
        r = co_await store.grant(round->keys(), round->token(), round->ttl(), round->queue(),
                                 round->stop_slot(i), round->replicas());
    }
    auto const changes = store.server_changes(round->keys());
    switch (round->answer(i, std::move(r), changes, std::move(fences))) {
    case grant_round::straggler::join_lease:
        leases->count(round->keys().key, round->token(), i, changes);
        break;
    case grant_round::straggler::give_back:
        give_back(*members, i, round);
        break;
    case grant_round::straggler::ignore:
        break;
    }
}

} // namespace

asio::awaitable<names_grant> run_grant(std::shared_ptr<quorum_members const> members,
                                       std::shared_ptr<quorum_leases> leases,
                                       std::shared_ptr<grant_round> round,
                                       asio::cancellation_slot stop, std::minstd_rand& rng) {
    auto const n = members->size();
    for (std::size_t i = 0; i < n; ++i)
        round->set_changes_at_start(i, members->store(i).server_changes(round->keys()));
    if (stop.is_connected())
        stop.assign([round](asio::cancellation_type) { round->stop(); });
    auto const started = clock_type::now();
    for (std::size_t i = 0; i < n; ++i)
        asio::co_spawn(members->strand(), ask_member(members, leases, round, i), asio::detached);
    co_await round->wait(quorum::attempt_timeout(round->ttl()), false);
    if (stop.is_connected())
        stop.clear();
    round->close();
    auto const elapsed = std::chrono::duration_cast<milliseconds>(clock_type::now() - started);
    auto out = round->outcome(elapsed, members->endpoints(), rng);
    if (out.result.granted)
        leases->record(round->keys().key, round->token(), std::move(out.counted));
    for (auto const i : out.give_back)
        give_back(*members, i, round);
    co_return names_grant{std::move(out.result), std::move(out.fences)};
}

} // namespace colock::detail::redlock
