// The semaphore's public face: construction, the acquire calls with their arguments checked at
// the call, and the permit. The waiting and the requests are in semaphore_core.cpp, what a
// permit shares with a read-write lock's guards in lease_guard.cpp.
#include "lock/semaphore/semaphore_core.hpp"

#include "detail/async_form.hpp"
#include "detail/completion.hpp"
#include "detail/spawn.hpp"
#include "lock/core/locker_context.hpp"

#include <colock/semaphore.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

namespace colock {

namespace asio = boost::asio;
using boost::system::error_code;
using boost::system::system_error;

// ---------------------------------------------------------------------- permit

std::size_t permit::count() const noexcept {
    return state_ ? state_->permits() : 0;
}

// ---------------------------------------------------------------------- semaphore

semaphore::semaphore(locker& l, std::string_view name, std::size_t capacity) {
    detail::validate_semaphore(name, capacity);
    core_ = std::make_shared<detail::semaphore_core>(detail::context_of(l), "semaphore",
                                                     "semaphore:", std::string(name), capacity);
}

semaphore::semaphore(semaphore&& other) noexcept = default;

semaphore::executor_type semaphore::get_executor() const noexcept {
    return core_ ? core_->locker().strand().get_inner_executor() : executor_type{};
}

semaphore& semaphore::operator=(semaphore&& other) noexcept {
    if (this != &other) {
        if (core_)
            core_->close();
        core_ = std::move(other.core_);
    }
    return *this;
}

semaphore::~semaphore() {
    if (core_)
        core_->close();
}

std::string const& semaphore::name() const noexcept {
    static std::string const none;
    return core_ ? core_->name() : none;
}

std::size_t semaphore::capacity() const noexcept {
    return core_ ? core_->capacity() : 0;
}

void semaphore::check(std::size_t permits, lock_options const& opt) const {
    if (!core_)
        throw system_error(error::invalid_argument, "colock: a moved-from semaphore");
    validate(core_->name(), opt);
    detail::validate_permits(core_->name(), core_->capacity(), permits);
}

void semaphore::start_acquire(std::shared_ptr<detail::semaphore_core> core, std::size_t permits,
                              lock_options opt, acquire_handler handler) {
    detail::spawn_acquire(std::move(core), permits, true, std::move(opt), true, std::move(handler),
                          [](acquire_handler h, error_code ec, detail::permit_outcome o) {
                              std::move(h)(ec, permit(std::move(o.state)));
                          });
}

void semaphore::start_try_acquire(std::shared_ptr<detail::semaphore_core> core, std::size_t permits,
                                  lock_options opt, try_acquire_handler handler) {
    detail::spawn_acquire(std::move(core), permits, true, std::move(opt), false, std::move(handler),
                          [](try_acquire_handler h, error_code ec, detail::permit_outcome o) {
                              std::optional<permit> p;
                              if (o.state)
                                  p.emplace(permit(std::move(o.state)));
                              std::move(h)(ec, std::move(p));
                          });
}

asio::awaitable<permit> semaphore::co_acquire(lock_options opt) {
    return co_acquire(1, std::move(opt));
}

asio::awaitable<permit> semaphore::co_acquire(std::size_t permits, lock_options opt) {
    check(permits, opt);
    auto out = co_await detail::await_acquire(core_, permits, true, std::move(opt), true);
    co_return permit(std::move(out.state));
}

asio::awaitable<std::optional<permit>> semaphore::co_try_acquire(lock_options opt) {
    return co_try_acquire(1, std::move(opt));
}

asio::awaitable<std::optional<permit>> semaphore::co_try_acquire(std::size_t permits,
                                                                 lock_options opt) {
    check(permits, opt);
    auto out = co_await detail::await_acquire(core_, permits, true, std::move(opt), false);
    if (!out.state)
        co_return std::nullopt;
    co_return permit(std::move(out.state));
}

namespace {

// The permits a reading leaves free.
std::size_t free_permits(detail::semaphore_reading const& reading, std::size_t capacity) {
    auto const held = static_cast<std::size_t>(reading.held);
    return held >= capacity ? 0 : capacity - held;
}

} // namespace

void semaphore::start_available(
    std::shared_ptr<detail::semaphore_core> core,
    asio::any_completion_handler<void(error_code, std::size_t)> handler) {
    auto strand = core->locker().strand();
    auto const capacity = core->capacity();
    // The core kept alive by the operation: the semaphore may go away meanwhile.
    auto op = [](std::shared_ptr<detail::semaphore_core> c)
        -> asio::awaitable<detail::semaphore_reading> { co_return co_await c->read(); }(core);
    detail::spawn_to_code(
        strand, std::move(op), std::move(handler),
        [capacity](detail::semaphore_reading const& r) { return free_permits(r, capacity); });
}

void semaphore::start_status(
    std::shared_ptr<detail::semaphore_core> core,
    asio::any_completion_handler<void(error_code, semaphore_status)> handler) {
    auto strand = core->locker().strand();
    auto op = detail::read_status(core);
    detail::spawn_to_code(strand, std::move(op), std::move(handler),
                          [](semaphore_status s) { return s; });
}

asio::awaitable<semaphore_status> semaphore::co_status() {
    check(1, lock_options{});
    auto core = core_;
    co_return co_await detail::on_strand<semaphore_status>(core->locker().strand(),
                                                           detail::read_status(core));
}

asio::awaitable<std::size_t> semaphore::co_available() {
    if (!core_)
        throw system_error(error::invalid_argument, "colock: a moved-from semaphore");
    auto core = core_;
    auto strand = core->locker().strand();
    auto initiation = [strand, op = core->read()](auto handler) mutable {
        detail::spawn_cancellable(strand, std::move(op), std::move(handler),
                                  [](auto h, std::exception_ptr e, detail::semaphore_reading r) {
                                      std::move(h)(e, std::move(r));
                                  });
    };
    auto [e, reading] =
        co_await asio::async_initiate<decltype(detail::nothrow_awaitable) const,
                                      void(std::exception_ptr, detail::semaphore_reading)>(
            std::move(initiation), detail::nothrow_awaitable);
    if (e)
        std::rethrow_exception(e);
    co_return free_permits(reading, core->capacity());
}

} // namespace colock
