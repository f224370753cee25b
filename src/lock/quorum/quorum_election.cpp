// An election's requests over a quorum's primaries, and their decisions.
#include "lock/quorum/quorum_election.hpp"

#include "lock/quorum/quorum.hpp"
#include "lock/quorum/quorum_members.hpp"
#include "lock/quorum/quorum_round.hpp"

#include <colock/error.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>

namespace colock::detail::redlock {

namespace asio = boost::asio;
using std::chrono::milliseconds;

namespace {

// How long a read of a quorum waits for the primaries that have not answered.
constexpr milliseconds quorum_read_timeout{2000};

// One request on every primary: each answer as it comes, until `decides` says the answers so
// far decide the round (or all answered).
template <class Answer>
class answers_round final : public round_state {
public:
    using decides_fn = std::function<bool(std::vector<std::optional<Answer>> const&)>;

    answers_round(asio::strand<asio::any_io_executor> const& strand, std::size_t n,
                  decides_fn decides)
        : round_state(strand, n), answers(n), decides_(std::move(decides)) {}

    void answer(std::size_t i, Answer a) {
        answers[i] = std::move(a);
        mark_answered(i);
        if (!decided() && (pending() == 0 || decides_(answers)))
            decide();
    }

    std::vector<std::optional<Answer>> answers;

private:
    decides_fn const decides_;
};

// Each coroutine owns the members, the round, and copies of what it sends.
asio::awaitable<void> proclaim_on(std::shared_ptr<quorum_members const> members,
                                  std::shared_ptr<answers_round<proclaim_result>> round,
                                  std::size_t i, lock_keys keys, proclaim_request request) {
    round->answer(i, co_await members->store(i).proclaim(keys, request));
}

asio::awaitable<void> read_on(std::shared_ptr<quorum_members const> members,
                              std::shared_ptr<answers_round<election_reading>> round, std::size_t i,
                              lock_keys keys) {
    round->answer(i, co_await members->store(i).read_election(keys));
}

std::pair<std::size_t, std::size_t>
proclaim_counts(std::vector<std::optional<proclaim_result>> const& answers) {
    std::pair<std::size_t, std::size_t> yes_no{0, 0};
    for (auto const& a : answers)
        if (a && !a->ec)
            ++(a->written ? yes_no.first : yes_no.second);
    return yes_no;
}

} // namespace

std::optional<bool> proclaim_decision(std::vector<std::optional<proclaim_result>> const& answers,
                                      std::size_t majority) {
    auto const [yes, no] = proclaim_counts(answers);
    if (yes >= majority)
        return true;
    if (no > answers.size() - majority)
        return false;
    return std::nullopt;
}

asio::awaitable<proclaim_result> run_proclaim(std::shared_ptr<quorum_members const> members,
                                              lock_keys const& keys,
                                              proclaim_request const& request) {
    auto const n = members->size();
    auto const majority = quorum::majority(n);
    auto round = std::make_shared<answers_round<proclaim_result>>(
        members->strand(), n, [majority](auto const& answers) {
            return proclaim_decision(answers, majority).has_value();
        });
    // Each primary's request is sent again over passing errors as the caller asked, but is not
    // cancelled: the round waits for the majority, at most as long as the lease lasts.
    proclaim_request each = request;
    each.still_ours = {};
    each.cancellable = false;
    for (std::size_t i = 0; i < n; ++i)
        asio::co_spawn(members->strand(), proclaim_on(members, round, i, keys, each),
                       asio::detached);
    co_await round->wait(std::max(request.lease_left, milliseconds{1}), false);
    if (auto const decided = proclaim_decision(round->answers, majority))
        co_return proclaim_result{{}, {}, *decided};
    std::string errors;
    for (std::size_t i = 0; i < n; ++i) {
        auto const& a = round->answers[i];
        auto const text = !a      ? std::string("no answer in time")
                          : a->ec ? (a->server_text.empty() ? a->ec.message() : a->server_text)
                                  : std::string();
        if (!text.empty())
            errors += fmt::format("{}primary {}: {}", errors.empty() ? "" : "; ", i + 1, text);
    }
    co_return proclaim_result{error::no_quorum,
                              fmt::format("{} of {} primaries took it, {} needed ({})",
                                          proclaim_counts(round->answers).first, n, majority,
                                          errors),
                              false};
}

asio::awaitable<election_reading> run_read_election(std::shared_ptr<quorum_members const> members,
                                                    lock_keys const& keys) {
    auto const majority = quorum::majority(members->size());
    auto const readings = [](std::vector<std::optional<election_reading>> const& answers) {
        std::vector<election_reading> out;
        for (auto const& a : answers) {
            if (a) {
                out.push_back(*a);
            } else {
                election_reading silent;
                silent.ec = error::timeout;
                out.push_back(std::move(silent));
            }
        }
        return out;
    };
    auto round = std::make_shared<answers_round<election_reading>>(
        members->strand(), members->size(), [readings, majority](auto const& answers) {
            return !decide_reading(readings(answers), majority).ec;
        });
    for (std::size_t i = 0; i < members->size(); ++i)
        asio::co_spawn(members->strand(), read_on(members, round, i, keys), asio::detached);
    co_await round->wait(quorum_read_timeout, false);
    co_return decide_reading(readings(round->answers), majority);
}

election_reading decide_reading(std::vector<election_reading> const& readings,
                                std::size_t majority) {
    std::map<std::int64_t, std::vector<election_reading const*>> leading_by_term;
    std::size_t not_leading = 0;
    milliseconds pending_claim{-2};
    std::int64_t lock_fence = 0;
    for (auto const& r : readings) {
        if (r.ec)
            continue;
        if (r.leading) {
            leading_by_term[r.term].push_back(&r);
        } else {
            ++not_leading;
            pending_claim = std::max(pending_claim, r.record_ttl);
            lock_fence = std::max(lock_fence, r.lock_fence);
        }
    }
    for (auto const& [term, group] : leading_by_term) {
        if (group.size() < majority)
            continue;
        std::vector<election_reading const*> by_version = group;
        std::sort(by_version.begin(), by_version.end(),
                  [](auto const* a, auto const* b) { return a->version > b->version; });
        election_reading out = *by_version[majority - 1];
        for (auto const* r : group)
            if (r->record_ttl.count() > 0)
                out.record_ttl = std::min(out.record_ttl, r->record_ttl);
        return out;
    }
    election_reading out;
    if (not_leading >= majority) {
        out.record_ttl = pending_claim; // a hand-over's claim: look again when it lapses
        out.lock_fence = lock_fence;
        return out;
    }
    auto const answered = static_cast<std::size_t>(
        std::count_if(readings.begin(), readings.end(), [](auto const& r) { return !r.ec; }));
    out.ec = error::no_quorum;
    out.server_text = fmt::format("{} of {} primaries answered, and no majority of them agrees "
                                  "on who leads",
                                  answered, readings.size());
    return out;
}

} // namespace colock::detail::redlock
