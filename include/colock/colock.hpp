/// \file
/// The public surface of colock: includes every public header.
#pragma once

/// \mainpage colock API reference
///
/// colock is a C++20 library of Redis-backed distributed locks for Boost.Asio coroutines. This
/// reference is generated from the comments of the public headers; the guide, the options,
/// the deployments and the rest are the pages of the repository's docs/ folder.
///
/// Where to start:
/// - colock::redis::connection, made from a colock::redis::config (or
///   colock::redis::config::from_url): one multiplexed, pipelined connection to a Redis
///   server, a Sentinel-resolved primary or a Cluster.
/// - colock::locker: takes locks on a connection (or, for Redlock, on several), with
///   co_lock / co_try_lock and their async_ forms.
/// - colock::lock_guard: holds one lock, renews its lease, reports its loss (wait_lost) and
///   gives it back (release(), or its destructor).
/// - colock::lock_options: the lease, renewal, waiting and replication settings of one call.
/// - colock::fenced_resource: writes to Redis applied only under a fence at least the highest
///   the resource has seen, so that a holder paused past its lease cannot write late.
/// - colock::error, colock::redis::error and colock::resp3::error: the error codes, each with
///   its own category.
///
/// Include `<colock/colock.hpp>` for all of it.

/// \namespace colock
/// Distributed locks: colock::locker, colock::lock_guard, their options, status, observer and
/// errors.

/// \namespace colock::redis
/// The Redis connection (colock::redis::connection), its configuration and its errors.

/// \namespace colock::resp3
/// The RESP3 protocol without I/O: the request builder, the reply parser and the value tree.

#include <colock/diagnostics.hpp>
#include <colock/election.hpp>
#include <colock/error.hpp>
#include <colock/fenced_resource.hpp>
#include <colock/functions_library.hpp>
#include <colock/lease_guard.hpp>
#include <colock/lock_observer.hpp>
#include <colock/lock_options.hpp>
#include <colock/lock_scope.hpp>
#include <colock/lock_status.hpp>
#include <colock/locker.hpp>
#include <colock/log.hpp>
#include <colock/redis/config.hpp>
#include <colock/redis/connection.hpp>
#include <colock/redis/error.hpp>
#include <colock/resp3/parser.hpp>
#include <colock/resp3/request.hpp>
#include <colock/resp3/value.hpp>
#include <colock/rw_lock.hpp>
#include <colock/semaphore.hpp>
#include <colock/semaphore_status.hpp>
#include <colock/version.hpp>
