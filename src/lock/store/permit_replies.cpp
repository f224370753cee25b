// The semaphore scripts' replies, read.
#include "lock/store/permit_replies.hpp"

#include "lock/store/lock_replies.hpp"

#include <colock/error.hpp>
#include <colock/lock_options.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace colock::detail {

using std::chrono::milliseconds;

semaphore_keys::semaphore_keys(std::string const& prefix, std::string_view name,
                               std::string_view owner, std::size_t semaphore_capacity)
    : key(fmt::format("{}{{{}}}", prefix, name))
    , permits_key(key + ":h")
    , weights_key(key + ":hw")
    , queue_key(key + ":q")
    , entries_key(key + ":qd")
    , channel_prefix(key + ":w:")
    , channel(channel_prefix + std::string(owner))
    , capacity(std::to_string(semaphore_capacity)) {}

namespace {

// A non-negative number of the reply, or nothing.
std::optional<std::int64_t> count(resp3::value const& v) {
    return replies::flag(v, 0, std::numeric_limits<std::int64_t>::max());
}

} // namespace

permit_grant read_permit_grant(script_reply const& reply) {
    permit_grant g;
    if (replies::failed(reply, g)) {
        // Refused by the server, or stopped before it was sent: it did not run.
        g.outcome_unknown = reply.ec != redis::error::server_error &&
                            reply.ec != boost::asio::error::operation_aborted;
        return g;
    }
    auto const& v = reply.value;
    auto const& e = v.elements;
    auto const kind =
        v.type == resp3::type::array && !e.empty() ? replies::flag(e[0], -1, 1) : std::nullopt;
    std::optional<std::int64_t> first, second;
    std::optional<std::string_view> stored;
    if (kind && e.size() == (*kind == 0 ? 3u : 2u)) {
        if (*kind == -1) {
            // The capacity as the server stores it, quoted to the user as it is.
            if (e[1].type == resp3::type::blob_string || e[1].type == resp3::type::simple_string)
                stored = e[1].as_string();
        } else {
            first = count(e[1]);
            if (*kind == 0)
                second = count(e[2]);
        }
    }
    // A fence of 0 is a reader's that follows no writer.
    if (!kind || (*kind == -1 ? !stored || stored->empty() : !first) || (*kind == 0 && !second)) {
        // A reply of another shape may still have granted permits to the token.
        auto out = replies::garbled<permit_grant>(v);
        out.outcome_unknown = true;
        return out;
    }
    switch (*kind) {
    case 1:
        g.granted = true;
        g.fence = *first;
        break;
    case 0:
        g.wait = milliseconds(std::min<std::int64_t>(*first, max_lock_ttl.count()));
        g.free = *second;
        break;
    default:
        g.stored = std::string(*stored);
        break;
    }
    return g;
}

lease_reply read_permit_reply(script_reply const& reply) {
    return read_extend(reply);
}

permit_extension read_permit_extension(script_reply const& reply) {
    if (reply.ec)
        return {lease_reply{reply.ec, false}, false};
    auto const answer = replies::flag(reply.value, 0, 2);
    if (!answer)
        return {lease_reply{error::unexpected_reply, false}, false};
    return {lease_reply{error_code{}, *answer != 0}, *answer == 2};
}

semaphore_reading read_semaphore(script_reply const& reply) {
    return replies::read_value<semaphore_reading>(
        reply, [](resp3::value const& v, semaphore_reading& r) {
            if (v.type != resp3::type::array || v.elements.size() != 6)
                return false;
            auto const& first = v.elements[0];
            auto const capacity =
                first.type == resp3::type::blob_string || first.type == resp3::type::simple_string
                    ? first.as_string()
                    : std::nullopt;
            auto const held = count(v.elements[1]);
            auto const queued = count(v.elements[2]);
            if (!capacity || !held || !queued)
                return false;
            if (!capacity->empty())
                r.capacity = std::string(*capacity);
            r.held = *held;
            r.queued = *queued;
            auto const fence = v.elements[3].as_string();
            auto const now = count(v.elements[4]);
            auto const& listed = v.elements[5];
            if (!fence || !now || listed.type != resp3::type::array || listed.elements.size() % 3)
                return false;
            r.fence = std::string(*fence);
            r.now_ms = *now;
            for (std::size_t i = 0; i < listed.elements.size(); i += 3) {
                auto const token = listed.elements[i].as_string();
                auto const expiry = count(listed.elements[i + 1]);
                auto const permits = count(listed.elements[i + 2]);
                if (!token || !expiry || !permits || *permits < 1)
                    return false;
                r.holdings.push_back({std::string(*token), *expiry, *permits});
            }
            return true;
        });
}

} // namespace colock::detail
