// The holder record, which names a locker's process while it holds leases, and the
// subscription a forced unlock reaches the locker through.
#include "lock/core/holder_record.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <fmt/format.h>

#include <climits>

#include <unistd.h>

#if defined(__GLIBC__)
#include <errno.h> // program_invocation_short_name
#endif

namespace colock::detail {

namespace asio = boost::asio;
using std::chrono::milliseconds;

namespace {

std::string host_name() {
    char name[HOST_NAME_MAX + 1] = {};
    if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0')
        return "unknown";
    return name;
}

std::string program_name() {
#if defined(__GLIBC__)
    if (program_invocation_short_name && *program_invocation_short_name)
        return program_invocation_short_name;
#endif
    return "unknown";
}

} // namespace

std::vector<std::pair<std::string, std::string>>
holder_record_fields(std::string const& client_name) {
    auto const started = std::chrono::duration_cast<milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
    return {{"host", host_name()},
            {"pid", std::to_string(::getpid())},
            {"program", program_name()},
            {"client_name", client_name},
            {"started", std::to_string(started)}};
}

holder_record::holder_record(std::shared_ptr<lease_store> store, std::string key,
                             std::string const& client_name)
    : store_(std::move(store)), key_(std::move(key)), fields_(holder_record_fields(client_name)) {}

void holder_record::keep(milliseconds ttl) {
    if (!listening_ && !closed_) {
        listening_ = true;
        asio::co_spawn(store_->strand(), listen_for_forced(shared_from_this()), asio::detached);
    }
    // Written to outlive the lease by two minutes, and again once it would not outlive it by
    // one: about once a minute while leases keep being granted or renewed.
    constexpr milliseconds margin{60000};
    auto const now = clock_type::now();
    if (now + ttl + margin <= expires_)
        return;
    expires_ = now + ttl + 2 * margin;
    store_->write_record(key_, fields_, ttl + 2 * margin);
}

void holder_record::close() {
    closed_ = true;
    if (subscribed_)
        store_->unsubscribe(key_);
}

asio::awaitable<void> holder_record::listen_for_forced(std::shared_ptr<holder_record> self) {
    auto const [ec, refusal] = co_await self->store_->subscribe(self->key_);
    if (!ec) {
        self->subscribed_ = true;
        if (self->closed_) // the locker went while the subscription was on its way
            self->store_->unsubscribe(self->key_);
        co_return;
    }
    if (self->store_->logs(log_level::warning))
        self->store_->log(log_level::warning,
                          fmt::format("colock: not subscribed to {} ({}); a forced unlock of a "
                                      "lock this locker holds is noticed at its next renewal",
                                      self->key_, refusal.empty() ? ec.message() : refusal));
}

} // namespace colock::detail
