// Breaking reference cycles when an execution context shuts down with work still pending.
//
// Asio's own I/O objects keep their pending operations in services, which the context's
// shutdown destroys. colock's engines keep some completion handlers in themselves (a request
// waiting for its reply, a guard's wait_lost), and such a handler may own the coroutine that
// owns the engine: a cycle nothing breaks when the context goes away with that work pending.
// Objects that hold handlers register here and drop them (without calling them) when the
// context shuts down, as Asio's services do.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/execution_context.hpp>

#include <memory>
#include <mutex>
#include <vector>

namespace colock::detail {

class holds_handlers {
public:
    virtual ~holds_handlers() = default;
    // Called once, on the thread destroying the context, after its threads have stopped:
    // destroy every stored handler without invoking it.
    virtual void drop_handlers() noexcept = 0;
};

class context_shutdown final : public boost::asio::execution_context::service {
public:
    using key_type = context_shutdown;
    static inline boost::asio::execution_context::id id;

    explicit context_shutdown(boost::asio::execution_context& ctx)
        : boost::asio::execution_context::service(ctx) {}

    // Registers `holder` with the context behind `ex`. Thread-safe.
    static void watch(boost::asio::any_io_executor const& ex, std::weak_ptr<holds_handlers> holder);

private:
    void add(std::weak_ptr<holds_handlers> holder);
    void shutdown() override;

    std::mutex mutex_;
    std::vector<std::weak_ptr<holds_handlers>> holders_;
};

} // namespace colock::detail
