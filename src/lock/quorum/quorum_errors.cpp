#include "lock/quorum/quorum_errors.hpp"

#include "lock/base/errors.hpp"
#include "lock/quorum/quorum.hpp"

#include <colock/error.hpp>

#include <boost/asio/error.hpp>

#include <fmt/format.h>

#include <stdexcept>

namespace colock::detail::redlock {

using boost::system::error_code;

std::string describe(error_code ec, std::string const& server_text) {
    if (server_text.empty())
        return ec.message();
    return fmt::format("{}: {}", ec.message(), server_text);
}

bool is_lasting(error_code ec, std::string const& server_text) {
    return ec && ec != boost::asio::error::operation_aborted && !is_transient(ec, server_text) &&
           !is_connect_failure(ec);
}

primary_error summarise(std::span<primary_error const> errors,
                        std::span<std::string const> endpoints) {
    std::string text;
    error_code lasting;
    std::string lasting_text;
    bool all_connect_failures = true;
    error_code first_connect_failure;
    for (std::size_t i = 0; i < endpoints.size(); ++i) {
        auto const& [ec, server_text] = errors[i];
        if (!ec || ec == boost::asio::error::operation_aborted)
            continue;
        auto const part =
            ec == error::no_quorum
                ? fmt::format("primary {}: {}", endpoints[i], server_text)
                : fmt::format("primary {}: {}", endpoints[i], describe(ec, server_text));
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
                        quorum::majority(endpoints.size()), endpoints.size(), text)};
}

std::optional<std::string> refusal_of(std::span<std::string const> run_ids) {
    try {
        quorum::check_primaries(run_ids);
    } catch (std::invalid_argument const& e) {
        return std::string(e.what());
    }
    return std::nullopt;
}

} // namespace colock::detail::redlock
