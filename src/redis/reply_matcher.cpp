#include "reply_matcher.hpp"

#include <algorithm>
#include <cassert>
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

} // namespace

void reply_matcher::add(std::size_t commands, std::vector<resp3::reply_shape> shapes) {
    assert(shapes.empty() || shapes.size() == commands);
    pending p;
    p.commands = commands;
    p.shapes = std::move(shapes);
    p.answers.resize(commands);
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
