#include <colock/resp3/request.hpp>

#include <stdexcept>

namespace colock::resp3 {
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

} // namespace

request::command_mark request::begin_command(std::string_view command, std::size_t argc) {
    if (command.empty())
        throw std::invalid_argument("colock::resp3::request: empty command name");

    // In RESP3 the subscribe family gets push confirmations instead of replies; the
    // connection must know, or it would wait for replies that never come.
    auto kind = command_kind::ordinary;
    if (iequals(command, "SUBSCRIBE") || iequals(command, "PSUBSCRIBE") ||
        iequals(command, "SSUBSCRIBE"))
        kind = command_kind::subscribe;
    else if (iequals(command, "UNSUBSCRIBE") || iequals(command, "PUNSUBSCRIBE") ||
             iequals(command, "SUNSUBSCRIBE"))
        kind = command_kind::unsubscribe;

    if (kind == command_kind::subscribe && argc < 2)
        throw std::invalid_argument("colock::resp3::request: " + std::string(command) +
                                    " needs at least one channel");

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

void request::end_command(command_kind kind, std::size_t channels) noexcept {
    ++commands_;
    switch (kind) {
    case command_kind::ordinary:
        ++expected_replies_;
        break;
    case command_kind::subscribe:
        expected_confirmations_ += channels;
        break;
    case command_kind::unsubscribe:
        // Without channels Redis confirms once per channel the connection was subscribed to,
        // and once if none: only the connection knows which, so count the minimum.
        expected_confirmations_ += channels == 0 ? 1 : channels;
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
}

} // namespace colock::resp3
