#include <colock/resp3/request.hpp>

#include <stdexcept>

namespace colock::resp3 {

std::string_view to_string(reply_kind kind) noexcept {
    switch (kind) {
    case reply_kind::ordinary:
        return "ordinary";
    case reply_kind::subscribe:
        return "subscribe";
    case reply_kind::psubscribe:
        return "psubscribe";
    case reply_kind::ssubscribe:
        return "ssubscribe";
    case reply_kind::unsubscribe:
        return "unsubscribe";
    case reply_kind::punsubscribe:
        return "punsubscribe";
    case reply_kind::sunsubscribe:
        return "sunsubscribe";
    case reply_kind::unmatchable:
        return "unmatchable";
    }
    return "unknown";
}
namespace {

bool iequals(std::string_view a, std::string_view b) noexcept {
    if (a.size() != b.size())
        return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        char c = a[i];
        if (c >= 'a' && c <= 'z')
            c = static_cast<char>(c - 'a' + 'A');
        if (c != b[i])
            return false;
    }
    return true;
}

void append_decimal(std::string& out, std::size_t n) {
    char buf[24];
    auto const r = std::to_chars(buf, buf + sizeof buf, n);
    out.append(buf, r.ptr);
}

// The kind a command has by its name alone; CLIENT REPLY needs its arguments too.
reply_kind kind_by_name(std::string_view command) noexcept {
    if (iequals(command, "SUBSCRIBE"))
        return reply_kind::subscribe;
    if (iequals(command, "PSUBSCRIBE"))
        return reply_kind::psubscribe;
    if (iequals(command, "SSUBSCRIBE"))
        return reply_kind::ssubscribe;
    if (iequals(command, "UNSUBSCRIBE"))
        return reply_kind::unsubscribe;
    if (iequals(command, "PUNSUBSCRIBE"))
        return reply_kind::punsubscribe;
    if (iequals(command, "SUNSUBSCRIBE"))
        return reply_kind::sunsubscribe;
    // HELLO may switch the connection to RESP2 (HELLO 2), where pushes come as ordinary arrays
    // and would be taken for replies; any HELLO re-authenticates and renames the client too.
    if (iequals(command, "MONITOR") || iequals(command, "RESET") || iequals(command, "HELLO"))
        return reply_kind::unmatchable;
    return reply_kind::ordinary;
}

bool is_subscribe(reply_kind k) noexcept {
    return k == reply_kind::subscribe || k == reply_kind::psubscribe || k == reply_kind::ssubscribe;
}

} // namespace

request::command_mark request::begin_command(std::string_view command, std::size_t argc) {
    if (command.empty())
        throw std::invalid_argument("colock::resp3::request: empty command name");

    auto kind = kind_by_name(command);
    if (is_subscribe(kind) && argc < 2)
        throw std::invalid_argument("colock::resp3::request: " + std::string(command) +
                                    " needs at least one channel");
    // Queued by MULTI: answered +QUEUED now, and inside EXEC's reply later.
    if (in_multi_ && kind != reply_kind::unmatchable)
        kind = reply_kind::ordinary;

    command_mark const mark{payload_.size(), kind};
    try {
        payload_ += '*';
        append_decimal(payload_, argc);
        payload_ += "\r\n";
        append_bulk(command);
    } catch (...) {
        payload_.resize(mark.size);
        throw;
    }
    return mark;
}

std::string_view request::argument(std::size_t from, std::size_t index) const noexcept {
    // The command was written by begin_command and append_bulk: "*N\r\n" then "$len\r\nbytes\r\n"
    // per argument, so the lengths can be trusted.
    std::string_view rest(payload_);
    rest.remove_prefix(from);
    rest.remove_prefix(rest.find("\r\n") + 2);
    for (std::size_t i = 0;; ++i) {
        if (rest.empty())
            return {};
        auto const eol = rest.find("\r\n");
        std::size_t len = 0;
        std::from_chars(rest.data() + 1, rest.data() + eol, len);
        rest.remove_prefix(eol + 2);
        if (i == index)
            return rest.substr(0, len);
        rest.remove_prefix(len + 2);
    }
}

void request::end_command(command_mark mark, std::string_view command, std::size_t args) {
    reply_shape shape{mark.kind, 0};
    if (shape.kind != reply_kind::ordinary && shape.kind != reply_kind::unmatchable)
        shape.channels = args;
    if (iequals(command, "CLIENT") && args >= 2 && iequals(argument(mark.size, 1), "REPLY") &&
        (iequals(argument(mark.size, 2), "OFF") || iequals(argument(mark.size, 2), "SKIP")))
        shape.kind = reply_kind::unmatchable;

    try {
        // Nothing is recorded until the first command that is not ordinary.
        if (shape.kind != reply_kind::ordinary || !shapes_.empty()) {
            shapes_.resize(commands_);
            shapes_.push_back(shape);
        }
        if (shape.kind == reply_kind::unmatchable && unmatchable_.empty()) {
            unmatchable_ = std::string(command);
            if (iequals(command, "CLIENT")) // CLIENT REPLY OFF, as the caller wrote it
                for (std::size_t i = 1; i <= 2; ++i)
                    (unmatchable_ += ' ') += argument(mark.size, i);
        }
    } catch (...) {
        if (shapes_.size() > commands_)
            shapes_.resize(commands_);
        payload_.resize(mark.size);
        throw;
    }

    ++commands_;
    if (iequals(command, "MULTI"))
        in_multi_ = true;
    else if (iequals(command, "EXEC") || iequals(command, "DISCARD"))
        in_multi_ = false;
    switch (shape.kind) {
    case reply_kind::ordinary:
    case reply_kind::unmatchable:
        ++expected_replies_;
        break;
    case reply_kind::subscribe:
    case reply_kind::psubscribe:
    case reply_kind::ssubscribe:
        expected_confirmations_ += args;
        break;
    case reply_kind::unsubscribe:
    case reply_kind::punsubscribe:
    case reply_kind::sunsubscribe:
        expected_confirmations_ += args == 0 ? 1 : args;
        break;
    }
}

void request::append_bulk(std::string_view bytes) {
    char header[24];
    header[0] = '$';
    auto const r = std::to_chars(header + 1, header + sizeof header, bytes.size());
    payload_.append(header, r.ptr);
    payload_ += "\r\n";
    payload_ += bytes;
    payload_ += "\r\n";
}

void request::clear() noexcept {
    payload_.clear();
    commands_ = 0;
    expected_replies_ = 0;
    expected_confirmations_ = 0;
    shapes_.clear();
    unmatchable_.clear();
    in_multi_ = false;
}

} // namespace colock::resp3
