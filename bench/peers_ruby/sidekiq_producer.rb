# frozen_string_literal: true

# Sidekiq producer for the Conveyor benchmark: the same command line and JSON summary as
# bench/harness/producer.py (which the Python systems use).
#   ruby sidekiq_producer.rb --url redis://127.0.0.1:PORT/DB --op one|bulk|paced|version
#        [--count N] [--start 0] [--sleep 0] [--batch 1000] [--interval 0.01]
# one: BenchJob.perform_async per job; bulk: Sidekiq::Client.push_bulk per batch; paced: one
# perform_async every --interval s. Job n carries [n, s, t], t the wall-clock time just before
# the call. The last stdout line is {"op", "count", "elapsed", "rate"} (the timed loop only).
require 'json'

args = { 'count' => 0, 'start' => 0, 'sleep' => 0.0, 'batch' => 1000, 'interval' => 0.01,
         'url' => '', 'op' => '' }
ARGV.each_slice(2) do |key, value|
  name = key.delete_prefix('--')
  raise ArgumentError, "unknown option #{key}" unless args.key?(name)

  args[name] = case args[name]
               when Integer then Integer(value)
               when Float then Float(value)
               else value
               end
end
ENV['BENCH_REDIS_URL'] = args['url'] unless args['url'].empty?
ENV['BENCH_LOG'] ||= File::NULL
require_relative 'sidekiq_jobs'

if args['op'] == 'version'
  puts JSON.generate(op: 'version', version: "#{Sidekiq::VERSION} (Ruby #{RUBY_VERSION})")
  exit 0
end

def now = Process.clock_gettime(Process::CLOCK_REALTIME)
def mono = Process.clock_gettime(Process::CLOCK_MONOTONIC)

start = args['start']
count = args['count']
sleep_s = args['sleep']
Sidekiq.redis(&:ping) # connect before the timed loop
t0 = mono
case args['op']
when 'one'
  (start...(start + count)).each { |n| BenchJob.perform_async(n, sleep_s, now) }
when 'bulk'
  (start...(start + count)).each_slice(args['batch']) do |nums|
    t = now
    Sidekiq::Client.push_bulk('class' => BenchJob, 'args' => nums.map { |n| [n, sleep_s, t] })
  end
when 'paced'
  count.times do |i|
    delay = t0 + (i * args['interval']) - mono
    sleep(delay) if delay.positive?
    BenchJob.perform_async(start + i, 0.0, now)
  end
else
  raise ArgumentError, "unknown op #{args['op']}"
end
elapsed = mono - t0
puts JSON.generate(op: args['op'], count: count, elapsed: elapsed,
                   rate: elapsed.positive? ? count / elapsed : 0.0)
