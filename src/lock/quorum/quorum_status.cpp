#include "lock/quorum/quorum_status.hpp"

#include "lock/base/common.hpp"
#include "lock/quorum/quorum.hpp"
#include "lock/quorum/quorum_errors.hpp"
#include "lock/quorum/quorum_members.hpp"

#include <colock/error.hpp>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <string_view>
#include <variant>
#include <vector>

namespace colock::detail::redlock {

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;
using boost::system::error_code;

std::optional<lock_state_words> state_of(lock_reading const& r) {
    // "H <fence> <owner> <token> <since> <queued>", "R <fence> <owner>", "F <fence>"
    std::vector<std::string_view> words;
    std::string_view rest(r.value);
    while (!rest.empty()) {
        auto const space = rest.find(' ');
        words.push_back(rest.substr(0, space));
        rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
    }
    std::size_t const expected = r.value.starts_with("H ")   ? 6
                                 : r.value.starts_with("R ") ? 3
                                 : r.value.starts_with("F ") ? 2
                                                             : 0;
    if (expected == 0 || words.size() != expected)
        return std::nullopt;
    std::int64_t fence = 0;
    auto const [end, ec] =
        std::from_chars(words[1].data(), words[1].data() + words[1].size(), fence);
    if (ec != std::errc{} || end != words[1].data() + words[1].size() || fence < 0)
        return std::nullopt;
    lock_state_words out{r.value[0], fence, {}};
    if (expected == 6)
        out.holder = std::string(words[3]);
    else if (expected == 3)
        out.holder = std::string(words[2]);
    return out;
}

lock_reading shared_reading(std::span<lock_reading const> readings) {
    // The state a majority shares: held for one token, handed to one locker (or to nobody,
    // after a forced unlock), or free; shown with the largest fence among them, which is the
    // lease's (each primary grants its own, and a lease's fence is the largest of its
    // majority's). With no majority in one state: free, with the largest fence any primary
    // keeps, so that the fence shown is never below one given. A value that is no lock's on
    // a primary is shown as it is (status names the key) when no majority state stands.
    auto const majority = quorum::majority(readings.size());
    std::size_t answered = 0;
    std::int64_t queued = 0;
    for (auto const& r : readings)
        if (!r.ec) {
            ++answered;
            queued = std::max(queued, r.queued);
        }
    lock_reading const* largest = nullptr; // the readable reading with the largest fence
    lock_reading const* foreign = nullptr; // a value that is no lock's
    for (auto const& r : readings) {
        if (r.ec || r.value.empty())
            continue;
        auto const state = state_of(r);
        if (!state) {
            foreign = foreign ? foreign : &r;
            continue;
        }
        if (!largest || state->fence > state_of(*largest)->fence)
            largest = &r;
        lock_reading const* best = &r;
        std::size_t same = 0;
        for (auto const& o : readings) {
            auto const other = o.ec ? std::nullopt : state_of(o);
            if (!other || other->kind != state->kind || other->holder != state->holder)
                continue;
            ++same;
            if (other->fence > state_of(*best)->fence)
                best = &o;
        }
        if (same >= majority) {
            lock_reading shared = *best;
            shared.queued = queued;
            return shared;
        }
    }
    lock_reading free;
    if (answered < majority) {
        auto const first = std::find_if(readings.begin(), readings.end(),
                                        [](auto const& r) { return r.ec.failed(); });
        free.ec =
            is_lasting(first->ec, first->server_text) ? first->ec : error_code(error::no_quorum);
        free.server_text = first->server_text;
    } else if (foreign) {
        free = *foreign;
    } else if (largest) {
        free.value = fmt::format("F {}", state_of(*largest)->fence);
        free.pttl = largest->pttl;
    }
    free.queued = queued;
    return free;
}

forced_unlock_result shared_forced_unlock(std::span<forced_unlock_result const> results,
                                          std::span<std::string const> endpoints) {
    forced_unlock_result result;
    std::size_t failed = 0;
    for (std::size_t i = 0; i < results.size(); ++i) {
        auto const& r = results[i];
        if (r.ec) {
            if (++failed == 1) {
                result.ec = r.ec;
                result.server_text =
                    fmt::format("primary {}: {}", endpoints[i], describe(r.ec, r.server_text));
            }
        } else if (r.ended && !result.ended) {
            result.ended = true;
            result.owner = r.owner;
            result.token = r.token;
        }
    }
    // Ended wherever it could be: a majority answering is enough for the lease to be over.
    if (failed <= results.size() - quorum::majority(results.size())) {
        result.ec = {};
        result.server_text.clear();
    }
    return result;
}

asio::awaitable<lock_reading> quorum_status::read(lock_keys const& keys) const {
    // One after the other, each bounded: status is not a hot path, and a primary that is
    // down must not hold it up for longer than status_read_timeout.
    std::vector<lock_reading> readings;
    for (std::size_t i = 0; i < members_->size(); ++i) {
        lock_timer timeout(members_->strand());
        timeout.expires_after(status_read_timeout);
        auto answer =
            co_await (members_->store(i).read(keys) || timeout.async_wait(asio::use_awaitable));
        if (answer.index() == 0) {
            readings.push_back(std::get<0>(std::move(answer)));
        } else {
            lock_reading late;
            late.ec = error::no_quorum;
            late.server_text = fmt::format("primary {}: no answer within {} ms",
                                           members_->endpoint(i), status_read_timeout.count());
            readings.push_back(std::move(late));
        }
    }
    co_return shared_reading(readings);
}

asio::awaitable<record_reading> quorum_status::read_record(std::string const& key) const {
    record_reading first;
    for (std::size_t i = 0; i < members_->size(); ++i) {
        auto r = co_await members_->store(i).read_record(key);
        if (!r.ec && !r.fields.empty())
            co_return r;
        if (i == 0)
            first = std::move(r);
    }
    co_return first;
}

asio::awaitable<forced_unlock_result>
quorum_status::force_unlock(lock_keys const& keys, std::string const& notify_prefix) const {
    std::vector<forced_unlock_result> results;
    for (std::size_t i = 0; i < members_->size(); ++i)
        results.push_back(co_await members_->store(i).force_unlock(keys, notify_prefix));
    co_return shared_forced_unlock(results, members_->endpoints());
}

} // namespace colock::detail::redlock
