// The quorum store's status readings, the deployment's facts, the errors of rounds without a
// majority, and the checks of the primaries (quorum_store_impl.hpp says how the parts fit).
#include "quorum_store.hpp"
#include "quorum_store_impl.hpp"

#include "errors.hpp"
#include "single_connection_store.hpp"

#include <colock/error.hpp>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <charconv>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <variant>
#include <vector>

namespace colock::detail {

namespace redlock {

using namespace asio::experimental::awaitable_operators;

std::string describe(error_code ec, std::string const& server_text) {
    if (server_text.empty())
        return ec.message();
    return fmt::format("{}: {}", ec.message(), server_text);
}

bool is_lasting(error_code ec, std::string const& server_text) {
    return ec && ec != asio::error::operation_aborted && !is_transient(ec, server_text) &&
           !is_connect_failure(ec);
}

asio::awaitable<lock_reading> quorum_store::read(lock_keys const& keys) {
    // One after the other, each bounded: status is not a hot path, and a primary that is
    // down must not hold it up for longer than status_read_timeout.
    std::vector<lock_reading> readings;
    for (auto& m : members_) {
        lock_timer timeout(strand_);
        timeout.expires_after(status_read_timeout);
        auto answer = co_await (m.store->read(keys) || timeout.async_wait(asio::use_awaitable));
        if (answer.index() == 0) {
            readings.push_back(std::get<0>(std::move(answer)));
        } else {
            lock_reading late;
            late.ec = error::no_quorum;
            late.server_text = fmt::format("primary {}: no answer within {} ms", m.endpoint,
                                           status_read_timeout.count());
            readings.push_back(std::move(late));
        }
    }
    // The state a majority shares: held for one token, handed to one locker (or to nobody,
    // after a forced unlock), or free; shown with the largest fence among them, which is the
    // lease's (each primary grants its own, and a lease's fence is the largest of its
    // majority's). With no majority in one state: free, with the largest fence any primary
    // keeps, so that the fence shown is never below one given. A value that is no lock's on
    // a primary is shown as it is (status names the key) when no majority state stands.
    auto const majority = quorum::majority(members_.size());
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
            co_return shared;
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
    co_return free;
}

asio::awaitable<record_reading> quorum_store::read_record(std::string const& key) {
    record_reading first;
    for (std::size_t i = 0; i < members_.size(); ++i) {
        auto r = co_await members_[i].store->read_record(key);
        if (!r.ec && !r.fields.empty())
            co_return r;
        if (i == 0)
            first = std::move(r);
    }
    co_return first;
}

asio::awaitable<forced_unlock_result> quorum_store::force_unlock(lock_keys const& keys,
                                                                 std::string const& notify_prefix) {
    forced_unlock_result result;
    std::size_t failed = 0;
    for (auto& m : members_) {
        auto r = co_await m.store->force_unlock(keys, notify_prefix);
        if (r.ec) {
            if (++failed == 1) {
                result.ec = r.ec;
                result.server_text =
                    fmt::format("primary {}: {}", m.endpoint, describe(r.ec, r.server_text));
            }
        } else if (r.ended && !result.ended) {
            result.ended = true;
            result.owner = r.owner;
            result.token = r.token;
        }
    }
    // Ended wherever it could be: a majority answering is enough for the lease to be over.
    if (failed <= members_.size() - quorum::majority(members_.size())) {
        result.ec = {};
        result.server_text.clear();
    }
    co_return result;
}

std::string quorum_store::last_error_text() const {
    std::string text;
    for (auto const& m : members_) {
        auto const why = m.store->last_error_text();
        if (why.empty())
            continue;
        if (!text.empty())
            text += "; ";
        text += fmt::format("primary {}: {}", m.endpoint, why);
    }
    return text;
}

std::pair<error_code, std::string> quorum_store::grant_error(grant_round const& round) const {
    std::vector<std::pair<error_code, std::string>> errors(members_.size());
    for (std::size_t i = 0; i < members_.size(); ++i) {
        if (!round.answered[i])
            errors[i] = {error::no_quorum, fmt::format("no answer within {} ms",
                                                       quorum::attempt_timeout(round.ttl).count())};
        else if (round.results[i].ec)
            errors[i] = {round.results[i].ec, round.results[i].server_text};
    }
    return summarise(errors);
}

std::pair<error_code, std::string>
quorum_store::summarise(std::vector<std::pair<error_code, std::string>> const& errors) const {
    std::string text;
    error_code lasting;
    std::string lasting_text;
    bool all_connect_failures = true;
    error_code first_connect_failure;
    for (std::size_t i = 0; i < members_.size(); ++i) {
        auto const& [ec, server_text] = errors[i];
        if (!ec || ec == asio::error::operation_aborted)
            continue;
        auto const part =
            ec == error::no_quorum
                ? fmt::format("primary {}: {}", members_[i].endpoint, server_text)
                : fmt::format("primary {}: {}", members_[i].endpoint, describe(ec, server_text));
        text += text.empty() ? part : "; " + part;
        if (!lasting && is_lasting(ec, server_text)) {
            lasting = ec;
            lasting_text = part;
        }
        if (is_connect_failure(ec)) {
            if (!first_connect_failure)
                first_connect_failure = ec;
        } else {
            all_connect_failures = false;
        }
    }
    if (lasting)
        return {lasting, lasting_text};
    if (first_connect_failure && all_connect_failures)
        return {first_connect_failure, text};
    return {error::no_quorum,
            fmt::format("fewer than {} of {} Redlock primaries answered: {}",
                        quorum::majority(members_.size()), members_.size(), text)};
}

std::optional<std::string> quorum_store::same_server_twice() const {
    std::vector<std::string> run_ids;
    for (auto const& m : members_)
        run_ids.push_back(redis::detail::engine_run_id(m.engine));
    try {
        quorum::check_primaries(run_ids);
    } catch (std::invalid_argument const& e) {
        return std::string(e.what());
    }
    return std::nullopt;
}

std::optional<quorum_store::lock_state_words> quorum_store::state_of(lock_reading const& r) {
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

} // namespace redlock

void check_redlock_primaries(std::span<redis::connection* const> primaries) {
    auto refuse = [](std::string const& what) {
        throw boost::system::system_error(make_error_code(error::invalid_argument),
                                          "colock: " + what);
    };
    for (std::size_t i = 0; i < primaries.size(); ++i)
        if (primaries[i] == nullptr)
            refuse(fmt::format("Redlock primary {} is a null pointer", i + 1));
    std::vector<std::string> unknown_run_ids(primaries.size());
    try {
        quorum::check_primaries(unknown_run_ids);
    } catch (std::invalid_argument const& e) {
        refuse(std::string(e.what()).substr(std::string_view("colock: ").size()));
    }
    for (std::size_t i = 0; i < primaries.size(); ++i) {
        auto const& engine = redis::detail::engine_of(*primaries[i]);
        if (redis::detail::engine_shards_channels(engine))
            refuse(fmt::format("Redlock primary {} is a Redis Cluster connection; each primary "
                               "must be one server (or a Sentinel-resolved primary)",
                               i + 1));
        for (std::size_t j = 0; j < i; ++j) {
            if (primaries[j] == primaries[i])
                refuse(fmt::format("Redlock primaries {} and {} are the same connection", j + 1,
                                   i + 1));
            auto const endpoint = redis::detail::engine_endpoint_text(engine);
            if (endpoint ==
                redis::detail::engine_endpoint_text(redis::detail::engine_of(*primaries[j])))
                refuse(fmt::format("Redlock primaries {} and {} are the same server ({}); each "
                                   "must be an independent primary",
                                   j + 1, i + 1, endpoint));
        }
    }
}

std::shared_ptr<lease_store> make_quorum_store(std::span<redis::connection* const> primaries) {
    check_redlock_primaries(primaries);
    auto strand = boost::asio::make_strand(
        redis::detail::engine_executor(redis::detail::engine_of(*primaries[0])));
    return std::make_shared<redlock::quorum_store>(primaries, std::move(strand));
}

} // namespace colock::detail
