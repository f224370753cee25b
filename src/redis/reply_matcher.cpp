#include "reply_matcher.hpp"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <string_view>
#include <utility>

namespace colock::redis::detail {

using resp3::reply_kind;

resp3::reply_kind confirmation_kind(resp3::value const& v) noexcept {
    // ["subscribe", channel, count]: anything shorter is some other push.
    if (v.type != resp3::type::push || v.elements.size() < 3)
        return reply_kind::ordinary;
    auto const name = v.elements[0].as_string();
    if (!name)
        return reply_kind::ordinary;
    if (*name == "subscribe")
        return reply_kind::subscribe;
    if (*name == "psubscribe")
        return reply_kind::psubscribe;
    if (*name == "ssubscribe")
        return reply_kind::ssubscribe;
    if (*name == "unsubscribe")
        return reply_kind::unsubscribe;
    if (*name == "punsubscribe")
        return reply_kind::punsubscribe;
    if (*name == "sunsubscribe")
        return reply_kind::sunsubscribe;
    return reply_kind::ordinary;
}

namespace {

bool names_no_channel(resp3::value const& confirmation) noexcept {
    return confirmation.elements[1].is_null();
}

// "<prefix><decimal>\r\n" at the front of `in`: the number, and `in` moved past it.
bool take_header(std::string_view& in, char prefix, std::size_t& n) noexcept {
    if (in.empty() || in.front() != prefix)
        return false;
    auto const eol = in.find("\r\n");
    if (eol == std::string_view::npos)
        return false;
    auto const r = std::from_chars(in.data() + 1, in.data() + eol, n);
    if (r.ec != std::errc{} || r.ptr != in.data() + eol)
        return false;
    in.remove_prefix(eol + 2);
    return true;
}

} // namespace

std::size_t first_command(std::string_view payload, std::vector<std::string_view>* arguments) {
    std::string_view in = payload;
    std::size_t argc = 0;
    if (!take_header(in, '*', argc) || argc == 0)
        return 0;
    if (arguments)
        arguments->clear();
    for (std::size_t i = 0; i < argc; ++i) {
        std::size_t len = 0;
        if (!take_header(in, '$', len) || in.size() < len + 2)
            return 0;
        if (arguments && i > 0)
            arguments->push_back(in.substr(0, len));
        in.remove_prefix(len + 2);
    }
    return payload.size() - in.size();
}

void reply_matcher::add(std::size_t commands, std::vector<resp3::reply_shape> shapes,
                        std::string_view payload) {
    assert(shapes.empty() || shapes.size() == commands);
    pending p;
    p.commands = commands;
    p.shapes = std::move(shapes);
    p.answers.resize(commands);
    bool const named = std::any_of(p.shapes.begin(), p.shapes.end(), [](resp3::reply_shape s) {
        return s.kind != reply_kind::ordinary && s.kind != reply_kind::unmatchable &&
               s.channels > 0;
    });
    if (named && !payload.empty()) {
        p.names.resize(commands);
        std::vector<std::string_view> arguments;
        for (std::size_t i = 0; i < commands; ++i) {
            std::size_t const size = first_command(payload, &arguments);
            if (size == 0) { // not the bytes of these commands: count, as without them
                p.names.clear();
                break;
            }
            payload.remove_prefix(size);
            auto const shape = p.shapes[i];
            if (shape.kind != reply_kind::ordinary && shape.kind != reply_kind::unmatchable &&
                shape.channels > 0 && arguments.size() == shape.channels)
                p.names[i].assign(arguments.begin(), arguments.end());
        }
    }
    pending_.push_back(std::move(p));
}

reply_matcher::pending* reply_matcher::current() noexcept {
    // Complete requests stay at the front until taken; at most one is there during feed().
    for (auto& p : pending_)
        if (!p.done())
            return &p;
    return nullptr;
}

bool reply_matcher::continues(pending const& p, reply_kind kind,
                              resp3::value const& v) const noexcept {
    auto const cmd = p.current();
    if (kind != cmd.kind)
        return false;
    // A second "none subscribed" push starts the next argument-less command.
    return !(cmd.channels == 0 && names_no_channel(v));
}

bool reply_matcher::completes(pending const& p, resp3::value const& confirmation) const noexcept {
    auto const cmd = p.current();
    if (cmd.channels > 0)
        return p.confirmations >= cmd.channels;
    // An argument-less UN- form: one push per subscription of its kind, or one saying none.
    if (names_no_channel(confirmation))
        return true;
    switch (cmd.kind) {
    case reply_kind::unsubscribe:
        return channels_ <= 0;
    case reply_kind::punsubscribe:
        return patterns_ <= 0;
    case reply_kind::sunsubscribe:
        return shard_ <= 0;
    default:
        return true; // a subscribe without channels is refused by the request builder
    }
}

void reply_matcher::track(reply_kind kind, resp3::value const& confirmation) noexcept {
    auto const count = confirmation.elements[2].as_integer();
    if (!count || *count < 0)
        return;
    // The count is the connection's total after the change, so the difference is what the
    // command changed: nothing for a channel already (or never) subscribed.
    switch (kind) {
    case reply_kind::subscribe:
    case reply_kind::unsubscribe:
        channels_ = std::max<std::int64_t>(0, channels_ + (*count - total_));
        total_ = *count;
        break;
    case reply_kind::psubscribe:
    case reply_kind::punsubscribe:
        patterns_ = std::max<std::int64_t>(0, patterns_ + (*count - total_));
        total_ = *count;
        break;
    case reply_kind::ssubscribe:
    case reply_kind::sunsubscribe:
        shard_ = *count;
        break;
    default:
        break;
    }
}

void reply_matcher::track_nested(resp3::value const& reply) noexcept {
    // A subscribe-family command inside MULTI is confirmed inside EXEC's array reply.
    if (reply.type != resp3::type::array)
        return;
    for (auto const& e : reply.elements)
        if (e.type == resp3::type::push)
            if (auto const kind = confirmation_kind(e); kind != reply_kind::ordinary)
                track(kind, e);
}

reply_matcher::route reply_matcher::feed(resp3::value& v) {
    bool const is_push = v.type == resp3::type::push;
    auto const kind = confirmation_kind(v);
    if (kind != reply_kind::ordinary)
        track(kind, v);
    else if (!is_push)
        track_nested(v);

    pending* p = current();
    if (p && p->confirmations > 0 && !continues(*p, kind, v)) {
        // The server has finished answering this command with fewer confirmations than
        // counted (only an argument-less UN- form whose count was unknown can do that).
        p->advance();
        p = current();
    }
    if (!p)
        return is_push ? route::listeners : route::unexpected;

    auto const cmd = p->current();
    if (is_push) {
        if (cmd.kind == reply_kind::ordinary || kind != cmd.kind)
            return route::listeners; // a message, or a confirmation nobody here asked for
        if (!p->names.empty() && !p->names[p->next].empty()) {
            // A named command: only its own channels confirm it. Another one of the same kind
            // is the server's own doing (a shard channel's slot moved).
            auto& waiting = p->names[p->next];
            auto const channel = v.elements[1].as_string();
            auto const it =
                channel ? std::find(waiting.begin(), waiting.end(), *channel) : waiting.end();
            if (it == waiting.end())
                return route::listeners;
            waiting.erase(it);
        }
        ++p->confirmations;
        p->answers[p->next] = v;
        if (completes(*p, v))
            p->advance();
        return route::answer_and_listeners;
    }
    if (cmd.kind == reply_kind::ordinary || cmd.kind == reply_kind::unmatchable || v.is_error()) {
        // An ordinary reply, or the one error that refuses a subscribe-family command whole.
        // An unmatchable command is answered by one reply too: only the connection's own
        // handshake HELLO gets here (users' requests holding one are refused unwritten).
        p->answers[p->next] = std::move(v);
        p->advance();
        return route::answer;
    }
    return route::unexpected;
}

bool reply_matcher::front_done() const noexcept {
    return !pending_.empty() && pending_.front().done();
}

std::vector<resp3::value> reply_matcher::take_front() {
    assert(front_done());
    auto answers = std::move(pending_.front().answers);
    pending_.pop_front();
    return answers;
}

void reply_matcher::drop_back() {
    assert(!pending_.empty());
    assert(pending_.back().next == 0 && pending_.back().confirmations == 0);
    pending_.pop_back();
}

void reply_matcher::clear() noexcept {
    pending_.clear();
    total_ = channels_ = patterns_ = shard_ = 0;
}

} // namespace colock::redis::detail
