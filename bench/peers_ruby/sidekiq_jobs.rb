# frozen_string_literal: true

# Sidekiq job for the Conveyor benchmark (bench/README.md), loaded by the worker
# (`sidekiq -r ./bench/peers_ruby/sidekiq_jobs.rb -q bench`) and by sidekiq_producer.rb.
# The job body is bench/peer_tasks/body.py's, in Ruby: it appends "S <n> <start> <enqueue time>"
# and "F <n> <finish>" to $BENCH_LOG (O_APPEND, one write(2) per line) and sleeps s seconds in
# between when s > 0. Environment: BENCH_REDIS_URL (redis://127.0.0.1:PORT/DB), BENCH_LOG,
# BENCH_SIDEKIQ_LOG_LEVEL (e.g. warn; Sidekiq's default logs two INFO lines per job).
require 'logger'
require 'sidekiq'

Sidekiq.configure_server { |config| config.redis = { url: ENV.fetch('BENCH_REDIS_URL') } }
Sidekiq.configure_client { |config| config.redis = { url: ENV.fetch('BENCH_REDIS_URL') } }
if (level = ENV['BENCH_SIDEKIQ_LOG_LEVEL'])
  Sidekiq.logger.level = Logger.const_get(level.upcase)
end

# The O_APPEND job log, opened once per process.
module BenchLog
  @mutex = Mutex.new
  @io = nil

  def self.io
    @io || @mutex.synchronize do
      @io ||= File.open(ENV.fetch('BENCH_LOG'), File::WRONLY | File::APPEND | File::CREAT)
    end
  end

  def self.now
    Process.clock_gettime(Process::CLOCK_REALTIME)
  end

  def self.record(line)
    io.syswrite(line)
  end
end

# The benchmark job: log start, optionally sleep, log finish.
class BenchJob
  include Sidekiq::Worker
  sidekiq_options queue: 'bench'

  def perform(num, sleep_s, t_enq)
    BenchLog.record(format("S %d %.6f %.6f\n", num, BenchLog.now, t_enq))
    sleep(sleep_s) if sleep_s.positive?
    BenchLog.record(format("F %d %.6f\n", num, BenchLog.now))
  end
end
