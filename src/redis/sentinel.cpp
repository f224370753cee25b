#include "sentinel.hpp"

#include <fmt/format.h>

#include <charconv>
#include <utility>
#include <vector>

namespace colock::redis::detail {
namespace {

std::optional<std::uint16_t> read_port(std::string_view text) {
    unsigned value = 0;
    auto const r = std::from_chars(text.data(), text.data() + text.size(), value);
    if (r.ec != std::errc{} || r.ptr != text.data() + text.size() || value == 0 || value > 65535)
        return std::nullopt;
    return static_cast<std::uint16_t>(value);
}

std::string shown(resp3::value const& v) {
    std::string text = resp3::to_debug_string(v);
    if (text.size() > 200)
        text = text.substr(0, 200) + "...";
    return text;
}

} // namespace

std::string address_text(server_address const& a) {
    if (a.host.find(':') != std::string::npos)
        return fmt::format("[{}]:{}", a.host, a.port);
    return fmt::format("{}:{}", a.host, a.port);
}

resp3::request sentinel_hello(config const& cfg, bool subscribe) {
    resp3::request req;
    std::vector<std::string> hello(1, "3");
    if (!cfg.sentinel.password.empty()) {
        hello.push_back("AUTH");
        hello.push_back(cfg.sentinel.username.empty() ? std::string("default")
                                                      : cfg.sentinel.username);
        hello.push_back(cfg.sentinel.password);
    }
    if (!cfg.client_name.empty()) {
        hello.push_back("SETNAME");
        hello.push_back(cfg.client_name);
    }
    req.push_range("HELLO", hello);
    if (subscribe)
        req.push("SUBSCRIBE", "+switch-master");
    req.push("SENTINEL", "GET-MASTER-ADDR-BY-NAME", cfg.sentinel.master_name);
    return req;
}

resp3::request sentinel_ask_primary(config const& cfg) {
    resp3::request req;
    req.push("SENTINEL", "GET-MASTER-ADDR-BY-NAME", cfg.sentinel.master_name);
    return req;
}

std::string read_sentinel_hello(resp3::value const& reply) {
    if (reply.is_error())
        return fmt::format("HELLO refused: {}", reply.text.empty() ? "(empty)" : reply.text);
    if (reply.type != resp3::type::map)
        return fmt::format("the answer to HELLO is not a map: {}", shown(reply));
    return {};
}

primary_answer read_primary_address(resp3::value const& reply, std::string_view master_name) {
    if (reply.is_error())
        return {std::nullopt, fmt::format("SENTINEL GET-MASTER-ADDR-BY-NAME refused: {}",
                                          reply.text.empty() ? "(empty)" : reply.text)};
    if (reply.is_null() || (reply.type == resp3::type::array && reply.elements.empty()))
        return {std::nullopt, fmt::format("does not monitor a master named '{}'", master_name)};
    if (reply.type == resp3::type::array && reply.elements.size() == 2) {
        auto const host = reply.elements[0].as_string();
        auto const port_text = reply.elements[1].as_string();
        auto const port = port_text ? read_port(*port_text) : std::nullopt;
        if (host && !host->empty() && port)
            return {server_address{std::string(*host), *port}, {}};
    }
    return {std::nullopt,
            fmt::format("the address of '{}' is not [host, port]: {}", master_name, shown(reply))};
}

std::optional<server_address> read_switch_master(resp3::value const& push,
                                                 std::string_view master_name) {
    if (push.type != resp3::type::push || push.elements.size() != 3)
        return std::nullopt;
    auto const kind = push.elements[0].as_string();
    auto const channel = push.elements[1].as_string();
    auto const payload = push.elements[2].as_string();
    if (!kind || *kind != "message" || !channel || *channel != "+switch-master" || !payload)
        return std::nullopt;
    // "<name> <old-ip> <old-port> <new-ip> <new-port>"; a master name has no spaces.
    std::vector<std::string_view> words;
    std::string_view rest = *payload;
    while (!rest.empty()) {
        auto const space = rest.find(' ');
        if (space != 0)
            words.push_back(rest.substr(0, space));
        if (space == std::string_view::npos)
            break;
        rest = rest.substr(space + 1);
    }
    if (words.size() != 5 || words[0] != master_name)
        return std::nullopt;
    auto const port = read_port(words[4]);
    if (!port || words[3].empty())
        return std::nullopt;
    return server_address{std::string(words[3]), *port};
}

primary_follower::primary_follower(std::string master_name, server_address current)
    : master_name_(std::move(master_name)), current_(std::move(current)) {}

primary_follower::verdict primary_follower::fail(std::string problem) {
    problem_ = std::move(problem);
    return outcome_ = verdict::failed;
}

primary_follower::verdict primary_follower::check(server_address const& now, verdict if_other) {
    if (now == current_)
        return verdict::keep_reading;
    moved_to_ = now;
    return outcome_ = if_other;
}

primary_follower::verdict primary_follower::on_value(resp3::value const& v) {
    if (v.type == resp3::type::push) {
        if (auto const to = read_switch_master(v, master_name_))
            return check(*to, verdict::moved);
        if (stage_ == stage::subscription && v.elements.size() == 3 &&
            v.elements[0].as_string() == std::optional<std::string_view>("subscribe"))
            stage_ = stage::addresses;
        return verdict::keep_reading; // other channels' messages, other confirmations
    }
    switch (stage_) {
    case stage::hello:
        if (auto problem = read_sentinel_hello(v); !problem.empty())
            return fail(std::move(problem));
        stage_ = stage::subscription;
        return verdict::keep_reading;
    case stage::subscription:
        // A confirmation is a push; a reply here is SUBSCRIBE's refusal.
        return fail(
            fmt::format("SUBSCRIBE +switch-master refused: {}", v.is_error() ? v.text : shown(v)));
    case stage::addresses:
        break;
    }
    auto answer = read_primary_address(v, master_name_);
    if (!answer.address)
        return fail(std::move(answer.problem));
    ++answers_;
    return check(*answer.address, verdict::disagrees);
}

std::string read_role(resp3::value const& reply) {
    if (reply.type != resp3::type::array || reply.elements.empty())
        return {};
    auto const role = reply.elements[0].as_string();
    return role ? std::string(*role) : std::string();
}

} // namespace colock::redis::detail
