// A translation unit of a program that still uses deprecated Asio names: colock's target must
// not define BOOST_ASIO_NO_DEPRECATED for it, or this stops compiling.
#include <colock/locker.hpp>
#include <colock/redis/connection.hpp>

#include <boost/asio/io_service.hpp>

int run_with_io_service() {
    boost::asio::io_service service;             // deprecated: io_context
    boost::asio::io_service::work work(service); // deprecated: executor_work_guard
    colock::redis::connection conn{service.get_executor(), colock::redis::config{}};
    return conn.is_connected() ? 1 : 0;
}
