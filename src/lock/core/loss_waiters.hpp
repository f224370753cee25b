// The wait_lost calls on one lease: each completes once, with an empty code when the lease is
// lost, not_held once it is let go, operation_aborted when its caller cancels it. Private to
// the library's sources.
#pragma once

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/strand.hpp>
#include <boost/system/error_code.hpp>

#include <memory>
#include <vector>

namespace colock::detail {

class loss_waiters : public std::enable_shared_from_this<loss_waiters> {
public:
    using handler_type = boost::asio::any_completion_handler<void(boost::system::error_code)>;
    // One wait_lost call.
    struct call;

    explicit loss_waiters(boost::asio::strand<boost::asio::any_io_executor> strand)
        : strand_(std::move(strand)) {}

    // A call completing `handler`; from any thread. Its cancellation is installed here, on the
    // caller's thread, where the caller emits, before anything is posted, so none is missed.
    std::shared_ptr<call> make(handler_type handler);
    // On the strand: `c` waits for the lease's end; false when it has completed already (its
    // caller cancelled it meanwhile).
    bool enroll(std::shared_ptr<call> const& c);
    // On the strand: completes `c` with `ec`, unless it has completed already.
    void finish(std::shared_ptr<call> const& c, boost::system::error_code ec);
    // On the strand: completes every call waiting with `ec`.
    void finish_all(boost::system::error_code ec);
    // The io_context shuts down: the calls waiting, taken out without completing them. Their
    // handlers may own the coroutine that owns the lease, so the caller destroys them last.
    std::vector<std::shared_ptr<call>> take_all() noexcept;

private:
    boost::asio::strand<boost::asio::any_io_executor> const strand_;
    std::vector<std::shared_ptr<call>> waiting_;
};

} // namespace colock::detail
