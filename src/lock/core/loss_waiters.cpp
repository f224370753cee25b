// The wait_lost calls on one lease.
#include "lock/core/loss_waiters.hpp"

#include "detail/completion.hpp"

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>

#include <algorithm>
#include <utility>

namespace colock::detail {

namespace asio = boost::asio;
using boost::system::error_code;

// `done` makes sure exactly one of (lost, let go, cancelled) completes it.
struct loss_waiters::call {
    // Move-constructed only: Boost 1.81's any_completion_handler move *assignment* recurses
    // forever (it copies from an lvalue through its converting constructor).
    explicit call(handler_type h)
        : handler(std::move(h)), slot(asio::get_associated_cancellation_slot(handler)) {}

    handler_type handler;
    asio::cancellation_slot slot;
    bool done = false;
};

std::shared_ptr<loss_waiters::call> loss_waiters::make(handler_type handler) {
    auto c = std::make_shared<call>(std::move(handler));
    if (c->slot.is_connected()) {
        c->slot.assign([weak_call = std::weak_ptr<call>(c),
                        weak_self = weak_from_this()](asio::cancellation_type) {
            auto cc = weak_call.lock();
            auto self = weak_self.lock();
            if (!cc || !self)
                return;
            asio::dispatch(self->strand_, [cc, self] {
                std::erase(self->waiting_, cc);
                self->finish(cc, asio::error::operation_aborted);
            });
        });
    }
    return c;
}

bool loss_waiters::enroll(std::shared_ptr<call> const& c) {
    if (c->done)
        return false;
    waiting_.push_back(c);
    return true;
}

void loss_waiters::finish(std::shared_ptr<call> const& c, error_code ec) {
    if (c->done)
        return;
    c->done = true;
    complete_now(strand_, std::move(c->handler), c->slot, ec);
}

void loss_waiters::finish_all(error_code ec) {
    auto calls = std::exchange(waiting_, {});
    for (auto& c : calls)
        finish(c, ec);
}

std::vector<std::shared_ptr<loss_waiters::call>> loss_waiters::take_all() noexcept {
    return std::exchange(waiting_, {});
}

} // namespace colock::detail
