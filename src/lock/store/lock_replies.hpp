// The lock scripts' replies read into the lease store's results: pure functions of a
// script_reply, so that every shape a server or a proxy could send (a wrong type, a wrong
// count, a negative or unknown number, an error where a value was due) is tested without one.
// A reply of any shape but the script's own is error::unexpected_reply, shown in server_text,
// and never read as "granted", "done" or "not ours". Declared, then defined, here: a new
// script's reader is one file's change. Private to the library's sources.
#pragma once

#include "lock/store/lease_store.hpp"
#include "lock/store/script_client.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/error.hpp>

#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace colock::detail {

// The acquire script's {1, fence, others} or {0, holder's pttl, others}, or a grant's bare fence
// (others 0). An outcome is unknown
// (outcome_unknown: the lease may be ours) for a failure after the request may have run: a
// lost connection or a garbled reply, not a refusal or a request stopped before it was sent.
grant_result read_grant(script_reply const& reply);

// The text of error::replicas_not_acknowledged for a grant that `acked` acknowledged for
// `wanted`.
std::string replicas_failure_text(wait_reply const& acked, replica_wait const& wanted);

// The extend script's 1 (extended) or 0 (not ours).
lease_reply read_extend(script_reply const& reply);

// The release script's 2 (handed to a queued locker), 1 (freed) or 0 (not ours).
lease_reply read_release(script_reply const& reply);

// extend_known's answers for `keys` leases, in order: `extended` true (1), false (0: ask the
// general extend). A refusal (server_error: an ACL, a proxy) leaves `extended` empty and `ec`
// clear, so each lease asks alone and hears the refusal itself; another failure, or a reply of
// any other shape (unexpected_reply), is every lease's `ec`.
struct known_extensions {
    boost::system::error_code ec;
    std::vector<bool> extended;
};
known_extensions read_known_extensions(script_reply const& reply, std::size_t keys);

// The status script's {value or "", pttl, live queue entries, server time}.
lock_reading read_lock(script_reply const& reply);

// HGETALL's map (RESP3) or flat array (RESP2) of string fields.
record_reading read_record(script_reply const& reply);

// The forced unlock's {1, owner, token} or {0}.
forced_unlock_result read_forced_unlock(script_reply const& reply);

// ------------------------------------------------------------------ definitions

using boost::system::error_code;
using std::chrono::milliseconds;

namespace replies {

// A number the script answers with, one of `low`..`high`; nothing for any other reply.
inline std::optional<std::int64_t> flag(resp3::value const& v, std::int64_t low,
                                        std::int64_t high) {
    if (v.type != resp3::type::number)
        return std::nullopt;
    auto const n = v.as_integer();
    if (!n || *n < low || *n > high)
        return std::nullopt;
    return n;
}

// A decimal number of 0 or more, the whole of `text`; else nothing.
inline std::optional<std::int64_t> number(std::string_view text) {
    std::int64_t n = 0;
    auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc() || end != text.data() + text.size() || n < 0)
        return std::nullopt;
    return n;
}

// The next word of `text` (up to a space), taken off it.
inline std::string_view next_word(std::string_view& text) {
    auto const space = text.find(' ');
    auto const word = text.substr(0, space);
    text = space == std::string_view::npos ? std::string_view() : text.substr(space + 1);
    return word;
}

// Sets `ec` and `server_text` of a result for a failed request or a garbled reply; true when
// it did (the result is complete).
template <class Result>
bool failed(script_reply const& reply, Result& r) {
    if (!reply.ec)
        return false;
    r.ec = reply.ec;
    r.server_text = std::string(reply.server_text());
    return true;
}

template <class Result>
Result garbled(resp3::value const& v) {
    Result r;
    r.ec = error::unexpected_reply;
    r.server_text = resp3::to_debug_string(v);
    return r;
}

// A failed request as it came; else `read(value, result)`, which answers false for a reply of
// a foreign shape: unexpected_reply, and nothing of what it read.
template <class Result, class Read>
Result read_value(script_reply const& reply, Read read) {
    Result r;
    if (failed(reply, r))
        return r;
    if (!read(reply.value, r))
        return garbled<Result>(reply.value);
    return r;
}

} // namespace replies

inline grant_result read_grant(script_reply const& reply) {
    grant_result r;
    if (replies::failed(reply, r)) {
        // Refused by the server, or stopped before it was sent: it did not run.
        r.outcome_unknown = reply.ec != redis::error::server_error &&
                            reply.ec != boost::asio::error::operation_aborted;
        return r;
    }
    auto const& v = reply.value;
    // A grant with nobody else queued: its fence alone, as a number or, from the uncontended
    // path, as its decimal text (the scripts grant none below 1).
    std::optional<std::int64_t> bare;
    if (v.type == resp3::type::number)
        bare = v.integer;
    else if (v.type == resp3::type::blob_string || v.type == resp3::type::simple_string)
        bare = replies::number(v.text).value_or(0);
    if (bare) {
        if (*bare < 1) {
            r = replies::garbled<grant_result>(v);
            r.outcome_unknown = true;
            return r;
        }
        r.granted = true;
        r.fence = *bare;
        return r;
    }
    auto const granted = v.elements.size() == 3 ? replies::flag(v.elements[0], 0, 1) : std::nullopt;
    auto const others = v.elements.size() == 3 ? replies::flag(v.elements[2], 0, 1) : std::nullopt;
    if (v.type != resp3::type::array || !granted || !others ||
        v.elements[1].type != resp3::type::number) {
        r = replies::garbled<grant_result>(v);
        r.outcome_unknown = true; // a garbled reply came from a script that did run
        return r;
    }
    auto const second = v.elements[1].integer;
    r.granted = *granted == 1;
    r.others_queued = *others == 1;
    if (r.granted) {
        if (second <= 0) {
            r = replies::garbled<grant_result>(v); // the scripts never grant a fence below 1
            r.outcome_unknown = true;
            return r;
        }
        r.fence = second;
    } else if (second >= 0) {
        r.holder_ttl = milliseconds(second);
    } else if (second == -1) {
        r.holder_ttl = milliseconds::max(); // set without expiry by hand: back off only
    } else {
        r.holder_ttl = milliseconds(0); // gone meanwhile: try again at once
    }
    return r;
}

inline std::string replicas_failure_text(wait_reply const& acked, replica_wait const& wanted) {
    return fmt::format(
        "{} of {} replicas acknowledged the lock within {} ms (WAIT){}; it was released",
        acked.replicas, wanted.count, wanted.timeout.count(),
        acked.refusal.empty() ? std::string() : ": WAIT refused: " + acked.refusal);
}

inline lease_reply read_extend(script_reply const& reply) {
    if (reply.ec)
        return lease_reply{reply.ec, false};
    auto const extended = replies::flag(reply.value, 0, 1);
    if (!extended)
        return lease_reply{error::unexpected_reply, false};
    return lease_reply{error_code{}, *extended == 1};
}

inline lease_reply read_release(script_reply const& reply) {
    if (reply.ec)
        return lease_reply{reply.ec, false};
    auto const released = replies::flag(reply.value, 0, 2);
    if (!released)
        return lease_reply{error::unexpected_reply, false};
    return lease_reply{error_code{}, *released != 0, *released == 2};
}

// acquire_known's 1 (granted `written`) or 0 (the key held something else: ask the general
// acquire, which `nullopt` says); an error as read_grant's.
inline std::optional<grant_result> read_known_grant(script_reply const& reply,
                                                    held_value const& written) {
    grant_result r;
    if (replies::failed(reply, r)) {
        r.outcome_unknown = reply.ec != redis::error::server_error &&
                            reply.ec != boost::asio::error::operation_aborted;
        return r;
    }
    auto const granted = replies::flag(reply.value, 0, 1);
    if (!granted) {
        r = replies::garbled<grant_result>(reply.value);
        r.outcome_unknown = true;
        return r;
    }
    if (*granted == 0)
        return std::nullopt;
    r.granted = true;
    r.fence = written.fence;
    r.written = written;
    return r;
}

// release_known's 1 (released free) or 0 (the key held something else: ask the general
// release, which `nullopt` says); an error as read_release's, any other reply unexpected_reply.
inline known_extensions read_known_extensions(script_reply const& reply, std::size_t keys) {
    known_extensions r;
    if (reply.ec == redis::error::server_error)
        return r;
    if (reply.ec) {
        r.ec = reply.ec;
        return r;
    }
    auto const& v = reply.value;
    if (v.type != resp3::type::array || v.elements.size() != keys) {
        r.ec = error::unexpected_reply;
        return r;
    }
    r.extended.reserve(keys);
    for (auto const& e : v.elements) {
        auto const extended = replies::flag(e, 0, 1);
        if (!extended) {
            r.extended.clear();
            r.ec = error::unexpected_reply;
            return r;
        }
        r.extended.push_back(*extended == 1);
    }
    return r;
}

inline std::optional<lease_reply> read_known_release(script_reply const& reply) {
    if (reply.ec)
        return lease_reply{reply.ec, false};
    auto const released = replies::flag(reply.value, 0, 1);
    if (!released)
        return lease_reply{error::unexpected_reply, false};
    if (*released == 0)
        return std::nullopt;
    return lease_reply{error_code{}, true, false};
}

inline lock_reading read_lock(script_reply const& reply) {
    return replies::read_value<lock_reading>(reply, [](resp3::value const& v, lock_reading& r) {
        auto const value = v.elements.size() == 4 ? v.elements[0].as_string() : std::nullopt;
        if (v.type != resp3::type::array || !value || v.elements[1].type != resp3::type::number ||
            v.elements[2].type != resp3::type::number || v.elements[2].integer < 0)
            return false;
        r.value = std::string(*value);
        r.pttl = v.elements[1].integer;
        r.queued = v.elements[2].integer;
        return true;
    });
}

inline record_reading read_record(script_reply const& reply) {
    return replies::read_value<record_reading>(reply, [](resp3::value const& v, record_reading& r) {
        bool const aggregate = v.type == resp3::type::map || v.type == resp3::type::array;
        if (!aggregate || v.elements.size() % 2 != 0)
            return false;
        for (std::size_t i = 0; i < v.elements.size(); i += 2) {
            auto const field = v.elements[i].as_string();
            auto const text = v.elements[i + 1].as_string();
            if (!field || !text)
                return false;
            r.fields.emplace_back(std::string(*field), std::string(*text));
        }
        return true;
    });
}

inline forced_unlock_result read_forced_unlock(script_reply const& reply) {
    return replies::read_value<forced_unlock_result>(
        reply, [](resp3::value const& v, forced_unlock_result& r) {
            auto const ended = v.type == resp3::type::array && !v.elements.empty()
                                   ? replies::flag(v.elements[0], 0, 1)
                                   : std::nullopt;
            if (!ended || (*ended == 1 && (v.elements.size() != 3 || !v.elements[1].as_string() ||
                                           !v.elements[2].as_string())))
                return false;
            if (*ended == 1) {
                r.ended = true;
                r.owner = std::string(*v.elements[1].as_string());
                r.token = std::string(*v.elements[2].as_string());
            }
            return true;
        });
}

// The proclaim's answer: 1 written, 0 the lease is not ours.
inline proclaim_result read_proclaim(script_reply const& reply) {
    return replies::read_value<proclaim_result>(reply,
                                                [](resp3::value const& v, proclaim_result& r) {
                                                    auto const done = replies::flag(v, 0, 1);
                                                    if (!done)
                                                        return false;
                                                    r.written = *done == 1;
                                                    return true;
                                                });
}

namespace replies {

// The fence of a lock value ("H <fence> ...", "R <fence> <owner>", "F <fence>"), else 0.
inline std::int64_t fence_of(std::string_view lock_value) {
    auto const kind = next_word(lock_value);
    if (kind != "H" && kind != "R" && kind != "F")
        return 0;
    return number(next_word(lock_value)).value_or(0);
}

// The token of a lock value "H <fence> <owner> <token> <since> <queued>", else empty.
inline std::string_view holding_token(std::string_view lock_value) {
    if (next_word(lock_value) != "H")
        return {};
    next_word(lock_value);
    next_word(lock_value);
    return next_word(lock_value);
}

} // namespace replies

// The election's read: {the lock's value, the record's token, term, value, version, owner, its
// PTTL}.
inline election_reading read_election(script_reply const& reply) {
    return replies::read_value<election_reading>(
        reply, [](resp3::value const& v, election_reading& r) {
            if (v.type != resp3::type::array || v.elements.size() != 7 ||
                v.elements[6].type != resp3::type::number)
                return false;
            std::string_view text[6];
            for (int i = 0; i < 6; ++i) {
                auto const s = v.elements[i].as_string();
                if (!s)
                    return false;
                text[i] = *s;
            }
            auto const& [lock_value, token, term, value, version, owner] = text;
            r.record_ttl = std::chrono::milliseconds(v.elements[6].integer);
            r.lock_fence = replies::fence_of(lock_value);
            if (version.empty())
                return term.empty() && token.empty(); // no record
            auto const version_n = replies::number(version);
            auto const term_n = replies::number(term);
            if (!version_n || *version_n == 0 || !term_n || *term_n == 0)
                return false;
            r.record = true;
            r.version = *version_n;
            r.term = *term_n;
            r.value = std::string(value);
            r.owner = std::string(owner);
            r.leading = !token.empty() && replies::holding_token(lock_value) == token;
            return true;
        });
}

} // namespace colock::detail
