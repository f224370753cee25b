#include <colock/redis/connection.hpp>
#include <colock/redis/error.hpp>

#include <string>

namespace colock::redis {
namespace {

class category final : public boost::system::error_category {
public:
    char const* name() const noexcept override { return "colock.redis"; }

    std::string message(int ev) const override {
        switch (static_cast<error>(ev)) {
        case error::server_error:
            return "the Redis server answered with an error";
        case error::connect_timeout:
            return "connecting to the Redis server timed out";
        case error::handshake_failed:
            return "the Redis server refused the connection handshake";
        case error::connection_lost:
            return "the connection to the Redis server was lost after the request "
                   "was sent";
        case error::health_check_timeout:
            return "the Redis server did not answer the health-check PING in time";
        case error::unexpected_reply:
            return "the Redis server sent a reply that was not expected";
        case error::closed:
            return "the Redis connection was closed";
        case error::unsupported_command:
            return "the request holds a command that a shared Redis connection "
                   "cannot send";
        case error::no_primary_address:
            return "no Redis sentinel gave the address of the primary";
        case error::not_primary:
            return "the Redis server the sentinels named is not a primary";
        case error::primary_changed:
            return "the Redis sentinels moved the primary to another server";
        case error::no_slot_map:
            return "no Redis Cluster node gave the slot map";
        case error::cross_slot:
            return "the request's keys hash to more than one Redis Cluster slot";
        case error::invalid_url:
            return "the URL cannot be read as a Redis deployment's";
        case error::invalid_config:
            return "the config cannot be used for a Redis connection";
        }
        return "unknown colock.redis error " + std::to_string(ev);
    }
};

} // namespace

boost::system::error_category const& error_category() noexcept {
    static category const instance;
    return instance;
}

server_error::server_error(std::string const& server_message)
    : boost::system::system_error(make_error_code(error::server_error), server_message)
    , server_message_(server_message) {}

connect_error::connect_error(boost::system::error_code ec, std::string message)
    // Without a source location: what the code says is the cause, not where Asio noticed it.
    : boost::system::system_error(boost::system::error_code(ec.value(), ec.category()), message)
    , message_(std::move(message)) {}

char const* connect_error::what() const noexcept {
    return message_.c_str();
}

std::string first_error_text(response const& resp) {
    for (auto const& v : resp)
        if (v.is_error())
            return v.text.empty() ? std::string("(empty error reply)") : v.text;
    return {};
}

std::string_view to_string(error e) noexcept {
    switch (e) {
    case error::server_error:
        return "server_error";
    case error::connect_timeout:
        return "connect_timeout";
    case error::handshake_failed:
        return "handshake_failed";
    case error::connection_lost:
        return "connection_lost";
    case error::health_check_timeout:
        return "health_check_timeout";
    case error::unexpected_reply:
        return "unexpected_reply";
    case error::closed:
        return "closed";
    case error::unsupported_command:
        return "unsupported_command";
    case error::no_primary_address:
        return "no_primary_address";
    case error::not_primary:
        return "not_primary";
    case error::primary_changed:
        return "primary_changed";
    case error::no_slot_map:
        return "no_slot_map";
    case error::cross_slot:
        return "cross_slot";
    case error::invalid_url:
        return "invalid_url";
    case error::invalid_config:
        return "invalid_config";
    }
    return "unknown";
}

} // namespace colock::redis
