// A lock set's requests over one connection, and their replies read.
#include "lock/store/name_sets.hpp"

#include "lock/base/errors.hpp"
#include "lock/store/lock_replies.hpp"
#include "lock/store/script_client.hpp"

#include <colock/error.hpp>
#include <colock/lock_options.hpp>

#include <boost/asio/dispatch.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <string_view>

namespace colock::detail {

namespace asio = boost::asio;
using std::chrono::milliseconds;

names_grant read_names_grant(script_reply const& reply, std::size_t names) {
    names_grant out;
    auto& r = out.result;
    if (replies::failed(reply, r)) {
        // Refused by the server, or stopped before it was sent: it did not run.
        r.outcome_unknown = reply.ec != redis::error::server_error &&
                            reply.ec != boost::asio::error::operation_aborted;
        return out;
    }
    auto const& v = reply.value;
    auto const& e = v.elements;
    auto const granted =
        v.type == resp3::type::array && !e.empty() ? replies::flag(e[0], 0, 1) : std::nullopt;
    bool shaped = granted && e.size() == (*granted == 1 ? names + 1 : 2u);
    if (shaped && *granted == 1) {
        for (std::size_t i = 1; i < e.size(); ++i) {
            auto const fence = replies::flag(e[i], 1, std::numeric_limits<std::int64_t>::max());
            if (!fence) {
                shaped = false;
                break;
            }
            out.fences.push_back(*fence);
        }
    } else if (shaped && !replies::flag(e[1], 0, std::numeric_limits<std::int64_t>::max())) {
        shaped = false;
    }
    if (!shaped) {
        out = names_grant{};
        out.result = replies::garbled<grant_result>(v);
        out.result.outcome_unknown = true; // a garbled reply came from a script that did run
        return out;
    }
    if (*granted == 1) {
        r.granted = true;
        r.fence = out.fences.front();
    } else {
        r.holder_ttl =
            milliseconds(std::min<std::int64_t>(*e[1].as_integer(), max_lock_ttl.count()));
    }
    return out;
}

lease_reply read_names_extension(script_reply const& reply, std::size_t names) {
    if (reply.ec)
        return lease_reply{reply.ec, false};
    auto const& v = reply.value;
    if (v.type != resp3::type::array || v.elements.size() != names)
        return lease_reply{error::unexpected_reply, false};
    bool every = true;
    for (auto const& one : v.elements) {
        auto const answer = replies::flag(one, 0, 1);
        if (!answer)
            return lease_reply{error::unexpected_reply, false};
        every = every && *answer == 1;
    }
    return lease_reply{boost::system::error_code{}, every};
}

namespace {

// The three keys of each name, as the scripts take them; views of `keys`.
std::vector<std::string_view> key_words(std::span<lock_keys const> keys) {
    std::vector<std::string_view> words;
    words.reserve(keys.size() * 3);
    for (auto const& k : keys) {
        words.push_back(k.key);
        words.push_back(k.queue_key);
        words.push_back(k.deadlines_key);
    }
    return words;
}

std::string release_argument(std::string const& entry, std::string const& token, bool leave) {
    return std::to_string(max_handoff_claim.count()) + (leave ? " l " : " h ") + entry + " " +
           token;
}

// What release_all is sent: the keys, how, and the last fences (a second argument only when
// there are some), owned for as long as the call is made.
struct release_words {
    release_words(std::span<lock_keys const> lock_keys_of, std::string const& entry,
                  std::string const& token, bool leave, std::span<std::int64_t const> fences)
        : keys(key_words(lock_keys_of))
        , how(release_argument(entry, token, leave))
        , last_fences(fmt::format("{}", fmt::join(fences, " ")))
        , has_fences(!fences.empty()) {}

    std::span<std::string_view const> more() const noexcept {
        return {&last_fences_view, has_fences ? 1u : 0u};
    }

    std::vector<std::string_view> const keys;
    std::string const how;
    std::string const last_fences;
    bool const has_fences;
    std::string_view const last_fences_view{last_fences};
};

lease_reply read_names_release(script_reply const& reply, std::size_t names) {
    if (reply.ec)
        return lease_reply{reply.ec, false};
    auto const held = replies::flag(reply.value, 0, static_cast<std::int64_t>(names));
    if (!held)
        return lease_reply{error::unexpected_reply, false};
    return lease_reply{boost::system::error_code{}, *held == static_cast<std::int64_t>(names)};
}

} // namespace

asio::awaitable<names_grant> name_set_requests::grant(std::span<lock_keys const> keys,
                                                      names_request const& request,
                                                      asio::cancellation_slot stop) const {
    auto const words = key_words(keys);
    auto const since = std::chrono::duration_cast<milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
    auto const holder = request.entry + " " + request.token + " " + std::to_string(since);
    auto const ttl_text = std::to_string(request.ttl.count());
    auto const queueing = std::string(request.queue ? "1 " : "0 ") +
                          std::to_string(queue_entry_ttl.count()) + " " +
                          std::to_string(max_handoff_claim.count());
    script_call const call{
        client_->scripts().acquire_all, {}, {holder, ttl_text, queueing}, {}, words};
    co_return read_names_grant(co_await client_->run(call, stop), keys.size());
}

asio::awaitable<lease_reply> name_set_requests::extend(std::span<lock_keys const> keys,
                                                       std::string const& token,
                                                       milliseconds ttl) const {
    std::vector<std::string_view> words;
    for (auto const& k : keys)
        words.push_back(k.key);
    auto const ttl_text = std::to_string(ttl.count());
    script_call const call{client_->scripts().extend_all, {}, {token, ttl_text}, {}, words};
    co_return read_names_extension(co_await client_->run(call), keys.size());
}

asio::awaitable<lease_reply>
name_set_requests::release(std::span<lock_keys const> keys, std::string const& entry,
                           std::string const& token, bool leave,
                           std::span<std::int64_t const> last_fences) const {
    release_words const args(keys, entry, token, leave, last_fences);
    script_call const call{
        client_->scripts().release_all, {}, {args.how}, {}, args.keys, args.more()};
    co_return read_names_release(
        co_await client_->run_retrying(call, leave ? leave_retries : release_retries), keys.size());
}

void name_set_requests::release_in_background(std::span<lock_keys const> keys,
                                              std::string const& entry, std::string const& token,
                                              bool leave, std::span<std::int64_t const> last_fences,
                                              std::function<void()> retry) const {
    release_words const args(keys, entry, token, leave, last_fences);
    script_call const call{
        client_->scripts().release_all, {}, {args.how}, {}, args.keys, args.more()};
    client_->run_detached(
        call, [strand = client_->strand(), retry = std::move(retry)](script_reply const& reply) {
            if (reply.ec && is_transient(reply.ec, reply.server_text()))
                asio::dispatch(strand, std::move(retry));
        });
}

} // namespace colock::detail
